"""Read the winners of (hardware, model) and the evidence behind each, read-only, and judge it.

A winner qualifies for export when its run is done and passed, carries check trials, timings with a
speedup CI above 1, and a device fingerprint of the hardware asked for; every other run of the same
(variant, config) in its bucket must not have failed; and its source must not import kerneltune
(the package runs without it). Everything that does not qualify becomes a Problem with its reason.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from sqlalchemy import exists, select
from sqlalchemy.orm import Session, selectinload

from db.models import NON_FAILING_VERDICTS, DeviceFingerprint, Job, Run, Variant, Winner
from export.errors import Problem
from kernels.deployment import slower_than_stock

# Top-level packages of kerneltune itself: a variant importing one cannot run in the exported wheel.
KERNELTUNE_PACKAGES = ("kernels", "workers", "db", "service", "search", "export")


class RunEvidence(BaseModel):
    run_id: str
    m: int
    verdict: str
    check_trials: list[dict[str, Any]]
    timer: str | None
    median_us: float
    p10_us: float | None
    p90_us: float | None
    cv: float | None
    n: int | None
    baseline_median_us: float
    speedup: float
    speedup_ci_lo: float
    speedup_ci_hi: float
    frac_of_floor: float | None
    uses_library: bool | None
    fingerprint_id: str
    finished_at: str | None


class Entry(BaseModel):
    slot: str
    shape_key: str
    shape: dict[str, Any]
    bucket: str
    variant_hash: str
    language: str
    source: str
    config: dict[str, Any]
    config_space_keys: list[str]
    author: str
    agent: str | None
    parent_hash: str | None
    notes: str
    winner: RunEvidence
    runs: list[RunEvidence]  # every M of the bucket measured for this (variant, config), winner included

    @property
    def module(self) -> str:
        return f"v_{self.variant_hash[:16]}"

    @property
    def ms(self) -> list[int]:
        return sorted({r.m for r in self.runs})

    @property
    def slower_ms(self) -> list[int]:
        """The M of the bucket at which its runs measured it slower than stock: the package serves stock there."""
        return slower_than_stock((r.m, r.speedup_ci_hi) for r in self.runs)


class StockEntry(BaseModel):
    slot: str
    shape_key: str
    shape: dict[str, Any]
    bucket: str


@dataclass
class Collection:
    entries: list[Entry] = field(default_factory=list)
    stock: list[StockEntry] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    fingerprints: dict[str, dict[str, Any]] = field(default_factory=dict)


def bucket_lo(bucket: str) -> int:
    return int(bucket.split("-")[0])


def _evidence(run: Run) -> RunEvidence | str:
    """The run's evidence, or why it is not evidence."""
    if run.status != "done" or run.verdict != "passed":
        return f"run {run.id} is {run.status}/{run.verdict}, not a passed run"
    check, bench = run.check or {}, run.bench or {}
    trials = check.get("trials") or []
    if not check.get("passed") or not trials:
        return f"run {run.id} has no passed check with trials"
    needed = ("median_us", "baseline_median_us", "speedup", "speedup_ci_lo", "speedup_ci_hi")
    missing = [k for k in needed if not isinstance(bench.get(k), (int, float))]
    if missing:
        return f"run {run.id} lacks timing evidence ({', '.join(missing)})"
    if run.fingerprint_id is None:
        return f"run {run.id} has no device fingerprint"
    return RunEvidence(
        run_id=run.id, m=run.m, verdict=run.verdict,
        check_trials=[{k: t.get(k) for k in ("kind", "seed", "passed", "rel_l2", "max_abs_err")} for t in trials],
        timer=bench.get("timer"), median_us=bench["median_us"], p10_us=bench.get("p10_us"), p90_us=bench.get("p90_us"),
        cv=bench.get("cv"), n=bench.get("n"), baseline_median_us=bench["baseline_median_us"], speedup=bench["speedup"],
        speedup_ci_lo=bench["speedup_ci_lo"], speedup_ci_hi=bench["speedup_ci_hi"],
        frac_of_floor=bench.get("frac_of_floor"), uses_library=run.uses_library, fingerprint_id=run.fingerprint_id,
        finished_at=run.finished_at.isoformat() if run.finished_at else None)


def kerneltune_imports(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return sorted({n for n in names if n.split(".")[0] in KERNELTUNE_PACKAGES})


def _winners(session: Session, hardware: str, model: str) -> list[Winner]:
    # Winner rows carry no model: a bucket belongs to the model when one of its runs came from a job
    # for that model (the stock winners included: their runs lost, but they were measured).
    of_model = (select(Run.id).join(Job, Job.id == Run.job_id)
                .where(Run.slot == Winner.slot, Run.shape_key == Winner.shape_key,
                       Run.batch_bucket == Winner.batch_bucket, Run.hardware == Winner.hardware,
                       Job.model_name == model))
    q = (select(Winner).where(Winner.hardware == hardware, exists(of_model))
         .options(selectinload(Winner.run).selectinload(Run.variant).selectinload(Variant.parent),
                  selectinload(Winner.run).selectinload(Run.fingerprint)))
    rows = list(session.scalars(q))
    rows.sort(key=lambda w: (w.slot, w.shape_key, bucket_lo(w.batch_bucket)))
    return rows


def _bucket_runs(session: Session, run: Run) -> list[Run]:
    q = (select(Run).where(Run.variant_id == run.variant_id, Run.config_key == run.config_key, Run.slot == run.slot,
                           Run.shape_key == run.shape_key, Run.batch_bucket == run.batch_bucket,
                           Run.hardware == run.hardware, Run.status == "done")
         .order_by(Run.m, Run.id))
    return list(session.scalars(q))


def collect(session: Session, *, hardware: str, model: str) -> Collection:
    out = Collection()
    for w in _winners(session, hardware, model):
        problem = lambda reason: Problem(slot=w.slot, shape_key=w.shape_key, bucket=w.batch_bucket, reason=reason)  # noqa: E731
        run = w.run
        if w.is_stock:
            shape = session.scalar(select(Run.shape).where(Run.slot == w.slot, Run.shape_key == w.shape_key).limit(1))
            out.stock.append(StockEntry(slot=w.slot, shape_key=w.shape_key, shape=shape, bucket=w.batch_bucket))
            continue
        if run is None:
            out.problems.append(problem("winner has no run: its evidence was deleted"))
            continue
        ev = _evidence(run)
        if isinstance(ev, str):
            out.problems.append(problem(ev))
            continue
        fp: DeviceFingerprint = run.fingerprint
        if run.hardware.lower() != hardware.lower() or fp.hardware_class.lower() != hardware.lower():
            out.problems.append(problem(f"evidence of run {run.id} was measured on {fp.hardware_class!r} "
                                        f"({fp.fields.get('name')}), not on {hardware!r}"))
            continue
        if ev.speedup_ci_lo <= 1.0:
            out.problems.append(problem(f"run {run.id} does not beat stock beyond noise (speedup CI low {ev.speedup_ci_lo:.3f})"))
            continue
        bucket_runs = _bucket_runs(session, run)
        failing = [r for r in bucket_runs if r.verdict not in NON_FAILING_VERDICTS]
        if failing:
            out.problems.append(problem(f"run {failing[0].id} of the same variant and config failed at M={failing[0].m} "
                                        f"({failing[0].verdict}: {failing[0].reason})"))
            continue
        imports = kerneltune_imports(run.variant.source)
        if imports:
            out.problems.append(problem(f"variant {run.variant.content_hash[:16]} imports {', '.join(imports)}: "
                                        "it cannot run without kerneltune"))
            continue
        runs = [e for r in bucket_runs if not isinstance(e := _evidence(r), str)]
        v = run.variant
        out.entries.append(Entry(
            slot=w.slot, shape_key=w.shape_key, shape=run.shape, bucket=w.batch_bucket, variant_hash=v.content_hash,
            language=v.language, source=v.source, config=dict(run.config), config_space_keys=sorted(v.config_space or {}),
            author=v.author, agent=v.agent, parent_hash=v.parent.content_hash if v.parent else None, notes=v.notes or "",
            winner=ev, runs=runs))
        out.fingerprints[fp.id] = {"hardware_class": fp.hardware_class, **fp.fields}
    return out
