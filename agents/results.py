"""Runs -> compact, actionable summaries for an agent.

An agent pays for every token it reads, so a job of hundreds of runs comes back as: verdict counts,
the best speedup per (shape, M), failures grouped by cause with one worked example each (the offending
source line, the first mismatching elements), and hints the harness can tell from the pattern of
verdicts across batch sizes and configs.

Input: runs as GET /v1/jobs/{id}/runs returns them (service.schemas.RunOut); a run may carry its
stages (``compile``/``check``/``bench``, as GET /v1/runs/{id} returns them). A worker RunResult dict
works too when merged with its RunSpec's identity (shape name, m, config): numbers missing at the top
level are read from its ``bench`` stage.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, Field

Run = Mapping[str, Any]

FAILED = ("compile_failed", "check_failed", "crashed", "timeout", "rejected", "error")
_LINE_IN_REASON = re.compile(r"\((?:variant )?line (\d+)\)")
_UNWRITTEN = re.compile(r"(\d+) of (\d+) elements NaN")
_REL_L2 = re.compile(r"relative L2 error ([0-9.eE+-]+)")
REASON_CHARS = 300  # a reason (possibly a traceback tail) is cut here: the example run keeps the gist


class Mismatch(BaseModel):
    index: list[int]
    got: float | None = Field(description="null: NaN/Inf or never written")
    expected: float | None


class RunVerdict(BaseModel):
    """One run, compact."""

    run_id: str | None = None
    shape: str | None = None
    m: int | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    status: str | None = None
    verdict: str | None = None
    reason_code: str | None = None
    reason: str | None = Field(default=None, description="why it did not pass (absent when it passed)")
    speedup: float | None = Field(default=None, description="stock time / variant time, same process")
    speedup_ci: tuple[float, float] | None = Field(default=None, description="95% bootstrap CI of the speedup")
    us: float | None = Field(default=None, description="median microseconds per call")
    stock_us: float | None = None
    frac_of_floor: float | None = Field(default=None, description="bandwidth floor time / variant time")
    vs_incumbent: float | None = Field(default=None, description="the bucket's winner's time / this time, timed "
                                       "in the same rounds (> 1: this run is faster); None: no winner to time beside")
    ranked_us: float | None = Field(default=None, description="what winners rank by: us in the incumbent's time base")
    source_line: str | None = Field(default=None, description="the variant source line the error points at")
    failed_trial: str | None = Field(default=None, description="which check trial failed (fresh, same_buffers_..)")
    mismatches: list[Mismatch] = Field(default_factory=list, description="first mismatching output elements")


class FailureGroup(BaseModel):
    verdict: str
    reason_code: str | None
    count: int
    shapes: list[str]
    ms: list[int]
    configs: list[dict[str, Any]] = Field(description="up to 3 of the configs that failed this way")
    example: RunVerdict


class SpeedCell(BaseModel):
    """The fastest passing config at one (shape, M)."""

    shape: str
    m: int
    speedup: float | None
    speedup_ci: tuple[float, float] | None
    us: float | None
    stock_us: float | None
    frac_of_floor: float | None
    config: dict[str, Any]
    versus_stock: str = Field(description="faster | slower | within noise (speedup CI vs 1)")
    versus_incumbent: str | None = Field(default=None, description="faster | slower | within noise: against the "
                                         "bucket's winner timed in the same rounds (None: no winner to time beside)")
    passed_configs: int
    tried_configs: int


class RunsSummary(BaseModel):
    runs: int
    finished: int
    by_verdict: dict[str, int]
    hardware: list[str]
    speed: list[SpeedCell]
    failures: list[FailureGroup]
    hints: list[str] = Field(description="what to try next, read off the pattern of verdicts")


# --- reading a run -------------------------------------------------------------------------------

def _num(run: Run, key: str) -> float | None:
    v = run.get(key)
    if v is None:
        v = (run.get("bench") or {}).get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _shape(run: Run) -> str | None:
    if run.get("shape_name"):
        return str(run["shape_name"])
    shape = run.get("shape")
    return str(shape.get("name")) if isinstance(shape, Mapping) and shape.get("name") else None


def config_key(config: Mapping[str, Any]) -> str:
    return json.dumps(dict(config), sort_keys=True, separators=(",", ":"))


def error_line(run: Run) -> int | None:
    """Line of the variant source a failure points at: the compile stage's, else the reason's."""
    comp = run.get("compile") or {}
    if isinstance(comp.get("line"), int):
        return int(comp["line"])
    m = _LINE_IN_REASON.search(run.get("reason") or "")
    return int(m.group(1)) if m else None


def source_line(source: str | None, line: int | None) -> str | None:
    if not source or not line:
        return None
    lines = source.splitlines()
    if not 1 <= line <= len(lines):
        return None
    return f"line {line}: {lines[line - 1].strip()}"


def _ci(run: Run) -> tuple[float, float] | None:
    return ci_for_display(_num(run, "speedup_ci_lo"), _num(run, "speedup_ci_hi"))


def ci_for_display(lo: float | None, hi: float | None, nd: int = 3) -> tuple[float, float] | None:
    """The speedup CI rounded to ``nd`` places, except a bound that rounding would move across 1.0 (e.g. a
    lower bound of 1.0004 is not shown as 1.0): "beats stock" is decided on the exact bound, and what an
    agent reads must agree with it."""
    if lo is None or hi is None:
        return None

    def keep_side(v: float) -> float:
        r = round(float(v), nd)
        return r if (r > 1.0) == (v > 1.0) and (r < 1.0) == (v < 1.0) else float(v)

    return keep_side(lo), keep_side(hi)


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(v, nd)


def verdict_of(run: Run, source: str | None = None, max_mismatches: int = 3) -> RunVerdict:
    verdict = run.get("verdict")
    check = run.get("check") or {}
    failed_trial = next((t.get("kind") for t in check.get("trials") or [] if not t.get("passed")), None)
    mism = [Mismatch(index=list(x.get("index") or []), got=x.get("got"), expected=x.get("expected"))
            for x in (check.get("mismatches") or [])[:max_mismatches]]
    reason = run.get("reason")
    passed = verdict == "passed"
    return RunVerdict(
        run_id=run.get("id") or run.get("run_id"), shape=_shape(run), m=run.get("m"),
        config=dict(run.get("config") or {}), status=run.get("status"), verdict=verdict,
        reason_code=run.get("reason_code") or None,
        reason=None if passed or not reason else reason[:REASON_CHARS],
        speedup=_r(_num(run, "speedup")), speedup_ci=_ci(run), us=_r(_num(run, "median_us")),
        stock_us=_r(_num(run, "baseline_median_us")), frac_of_floor=_r(_num(run, "frac_of_floor")),
        vs_incumbent=_r(_num(run, "vs_control")), ranked_us=_r(_num(run, "ranked_us")),
        source_line=None if passed else source_line(source, error_line(run)),
        failed_trial=None if passed else failed_trial, mismatches=[] if passed else mism)


def versus_stock(ci: tuple[float, float] | None, speedup: float | None) -> str:
    if ci is not None:
        return "faster" if ci[0] > 1.0 else "slower" if ci[1] < 1.0 else "within noise"
    return "within noise" if speedup is None else ("faster" if speedup > 1 else "slower")


# --- summarising ---------------------------------------------------------------------------------

def representatives(runs: Iterable[Run]) -> list[str]:
    """One run id per failure group: the runs worth fetching in detail (GET /v1/runs/{id})."""
    seen: dict[tuple[str, str | None], str] = {}
    for r in runs:
        if r.get("verdict") in FAILED or r.get("verdict") == "compiled":
            seen.setdefault((r["verdict"], r.get("reason_code")), str(r.get("id") or r.get("run_id")))
    return list(seen.values())


def summarize(runs: list[Run], source: str | None = None,
              details: Mapping[str, Run] | None = None) -> RunsSummary:
    """``details``: run id -> the run with its stages, for the runs that have them fetched."""
    details = details or {}
    full = [dict(details.get(str(r.get("id") or r.get("run_id")), {}), **{k: v for k, v in r.items()
                                                                          if v is not None})
            for r in runs]
    by_verdict: dict[str, int] = defaultdict(int)
    for r in full:
        by_verdict[r.get("verdict") or r.get("status") or "queued"] += 1
    finished = sum(1 for r in full if r.get("verdict"))
    speed = _speed_cells(full)
    failures = _failure_groups(full, source)
    hints = _hints(full, speed, failures)
    hardware = sorted({str(r["hardware"]) for r in full if r.get("hardware")})
    return RunsSummary(runs=len(full), finished=finished, by_verdict=dict(sorted(by_verdict.items())),
                       hardware=hardware, speed=speed, failures=failures, hints=hints)


def _speed_cells(runs: list[Run]) -> list[SpeedCell]:
    cells: dict[tuple[str, int], list[Run]] = defaultdict(list)
    for r in runs:
        if r.get("verdict") and r.get("m") is not None:
            cells[(_shape(r) or "?", int(r["m"]))].append(r)
    out = []
    for (shape, m), rs in sorted(cells.items()):
        ok = [r for r in rs if r.get("verdict") == "passed" and _num(r, "speedup") is not None]
        if not ok:
            continue
        # Fastest first, as the leaderboard and the winner rule rank: by ranked_us (the median in the time base of
        # the incumbent the run was timed beside), the median where the run has none.
        best = min(ok, key=lambda r: (_num(r, "ranked_us") or _num(r, "median_us") or float("inf"),
                                      -(_num(r, "speedup") or 0.0)))
        ci, sp = _ci(best), _num(best, "speedup")
        vs_inc = _num(best, "vs_control")
        out.append(SpeedCell(shape=shape, m=m, speedup=_r(sp), speedup_ci=ci, us=_r(_num(best, "median_us")),
                             stock_us=_r(_num(best, "baseline_median_us")),
                             frac_of_floor=_r(_num(best, "frac_of_floor")), config=dict(best.get("config") or {}),
                             versus_stock=versus_stock(ci, sp), passed_configs=len(ok),
                             versus_incumbent=None if vs_inc is None else versus_stock(
                                 ci_for_display(_num(best, "vs_control_ci_lo"), _num(best, "vs_control_ci_hi")), vs_inc),
                             tried_configs=len({config_key(r.get("config") or {}) for r in rs})))
    return out


def _failure_groups(runs: list[Run], source: str | None) -> list[FailureGroup]:
    groups: dict[tuple[str, str | None], list[Run]] = defaultdict(list)
    for r in runs:
        if r.get("verdict") in FAILED or r.get("verdict") == "compiled":
            groups[(r["verdict"], r.get("reason_code") or None)].append(r)
    out = []
    for (verdict, code), rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        # The example is the run with the most evidence: stages fetched beat a bare row.
        example = max(rs, key=lambda r: (bool(r.get("check") or r.get("compile")), -(r.get("m") or 0)))
        configs: dict[str, dict[str, Any]] = {}
        for r in rs:
            configs.setdefault(config_key(r.get("config") or {}), dict(r.get("config") or {}))
        out.append(FailureGroup(verdict=verdict, reason_code=code, count=len(rs),
                                shapes=sorted({_shape(r) or "?" for r in rs}),
                                ms=sorted({int(r["m"]) for r in rs if r.get("m") is not None}),
                                configs=list(configs.values())[:3], example=verdict_of(example, source)))
    return out


# --- hints ---------------------------------------------------------------------------------------

def _ms_phrase(ms: list[int], all_ms: list[int]) -> str:
    """'M>=32' / 'M<=4' / 'M=1' / 'M in {2, 8}' relative to the batch sizes that were run."""
    ms, all_ms = sorted(set(ms)), sorted(set(all_ms))
    if len(ms) == 1:
        return f"M={ms[0]}"
    if len(ms) < len(all_ms) and ms == all_ms[-len(ms):]:
        return f"M>={ms[0]}"
    if len(ms) < len(all_ms) and ms == all_ms[:len(ms)]:
        return f"M<={ms[-1]}"
    return "M in {" + ", ".join(map(str, ms)) + "}"


_REJECTED = {
    "cached_output": "it returned an answer from an earlier call (cached by address, id() or content): "
                     "compute from the inputs on every call",
    "wrote_inputs": "it modified its inputs: write only to the output tensors",
    "undeclared_library_call": "it calls library GEMMs (cuBLAS/oneDNN through torch): set USES_LIBRARY = True "
                               "in the module (then it is ranked as a library call) or write the GEMM yourself",
    "timed_output_mismatch": "its outputs were wrong during the timed calls although the check passed: no warm-up "
                             "detection, no deferred or batched work",
    "stream_escape": "it launched work outside the timed stream: run everything on the current stream",
    "implausible_timing": "its timing beat the memory-bandwidth floor, which no honest kernel can",
    "forged_result": "bytes appeared on the harness' result channel: do not write to inherited descriptors",
}


def _hints(runs: list[Run], speed: list[SpeedCell], failures: list[FailureGroup]) -> list[str]:
    hints: list[str] = []
    all_ms = sorted({int(r["m"]) for r in runs if r.get("m") is not None})
    for g in failures:
        hints.extend(_failure_hints(g, runs, all_ms))
    hints.extend(_speed_hints(speed, all_ms))
    if any(r.get("hardware") == "cpu" for r in runs) and speed:
        hints.append("timings are from a CPU worker: they rank variants on this CPU only; evaluate with "
                     "hardware=\"h200\" for GPU numbers")
    if not runs:
        hints.append("no runs yet")
    elif not any(r.get("verdict") for r in runs):
        hints.append("no run has finished yet: wait_for_job again")
    return hints


def _passing_ms(runs: list[Run], g: FailureGroup) -> list[int]:
    """Ms at which the configs of this failure group passed on the same shapes."""
    keys = {config_key(c) for c in g.configs}
    return sorted({int(r["m"]) for r in runs if r.get("verdict") == "passed" and _shape(r) in g.shapes
                   and config_key(r.get("config") or {}) in keys and r.get("m") is not None})


def _failure_hints(g: FailureGroup, runs: list[Run], all_ms: list[int]) -> list[str]:
    ex, code = g.example, g.reason_code or ""
    at = f" ({ex.source_line})" if ex.source_line else ""
    where = _ms_phrase(g.ms, all_ms)
    pairs = {(_shape(r), config_key(r.get("config") or {})) for r in runs}
    failed_pairs = {(_shape(r), config_key(r.get("config") or {})) for r in runs
                    if r.get("verdict") == g.verdict and (r.get("reason_code") or None) == g.reason_code}
    if g.verdict == "compiled":
        return ["compiled only: this worker cannot run the language; check and bench wait for a GPU queue "
                "(start_evaluation with hardware=\"h200\")"]
    if g.verdict == "error":
        return [f"harness error at {where}, not the variant's fault ({(ex.reason or '')[:120]}): retry; "
                "report it if it persists"]
    if g.verdict == "compile_failed":
        if code == "syntax_error":
            return [f"syntax error{at}: fix it and resubmit"]
        if failed_pairs == pairs:
            return [f"build() fails for every config and shape{at}: {(ex.reason or '')[:160]}"]
        shown = ", ".join(f"{shape} {cfg}" for shape, cfg in sorted(failed_pairs, key=str)[:3])
        return [f"build() fails for {len(failed_pairs)} of {len(pairs)} (shape, config) pairs (e.g. {shown}){at}: "
                f"{(ex.reason or '')[:160]}; exclude those configs with CONSTRAINTS or handle the shapes in build()"]
    if g.verdict == "rejected":
        why = _REJECTED.get(code, f"{code}: {(ex.reason or '')[:160]}")
        return [f"rejected by the harness at {where}: {why}"]
    if g.verdict == "timeout":
        return [f"hit the time limit at {where}: an endless loop, or a path far too slow for these shapes"]
    out: list[str] = []
    passing = _passing_ms(runs, g)
    if passing:
        if max(g.ms) < min(passing):
            out.append(f"fails only at {where} (passes at {_ms_phrase(passing, all_ms)}): check masking of "
                       "partial tiles when M is smaller than the tile (BLOCK_M) and the loop bounds over M")
        elif min(g.ms) > max(passing):
            out.append(f"fails only at {where} (passes at {_ms_phrase(passing, all_ms)}): check that the grid "
                       "covers every row of M and that offsets do not overflow")
        else:
            out.append(f"fails at {where} but passes at {_ms_phrase(passing, all_ms)}: check masking for M "
                       "that is not a multiple of the tile size")
    if g.verdict == "crashed":
        if code.startswith("signal_") or code.startswith("exit_"):
            out.append(f"the evaluation process died ({code}) at {where}: an illegal memory access or "
                       "out-of-bounds pointer; check bounds and masks")
        else:
            out.append(f"raises at {where}{at}: {(ex.reason or '')[:160]}")
    elif code == "unwritten_output":
        n = _UNWRITTEN.search(ex.reason or "")
        part = f" ({n.group(1)} of {n.group(2)} elements)" if n else ""
        out.append(f"outputs left unwritten at {where}{part}: every element of the output must be written, "
                   "tail tiles included")
    elif code == "nan_output":
        out.append(f"writes NaN/Inf at {where}: check accumulator initialisation and out-of-bounds loads")
    elif code == "chained_mismatch":
        out.append(f"the chained build (build(..., pdl=1)) is wrong at {where} while the plain one is right: before "
                   "griddepcontrol.wait it may load only weights; activations written by the kernel ahead are "
                   "poison until that wait returns")
    elif code == "chained_build_error":
        out.append(f"build(..., pdl=1) fails at {where}{at}: {(ex.reason or '')[:160]}")
    elif g.verdict == "check_failed":
        rel = _REL_L2.search(ex.reason or "")
        first = ex.mismatches[0] if ex.mismatches else None
        elem = (f"; first bad element {first.index}: got {first.got}, expected {_r(first.expected, 4)}"
                if first else "")
        if ex.failed_trial and ex.failed_trial not in ("fresh", "timed"):
            out.append(f"right on the first call but wrong on the '{ex.failed_trial}' trial at {where}: "
                       "the kernel keeps state between calls (a cache or a stale buffer)")
        elif rel and float(rel.group(1)) >= 0.1:
            out.append(f"wrong result at {where} (relative L2 {float(rel.group(1)):.2f}{elem}): check that the "
                       "reduction covers all of K and the layouts (see the slot's calling convention)")
        elif rel:
            out.append(f"close but outside tolerance at {where} (relative L2 {float(rel.group(1)):.1e}): "
                       "accumulate in fp32 and round once at the end")
        else:
            out.append(f"check failed at {where}: {(ex.reason or '')[:160]}{elem}")
    return out


def _speed_hints(speed: list[SpeedCell], all_ms: list[int]) -> list[str]:
    out: list[str] = []
    by_shape: dict[str, list[SpeedCell]] = defaultdict(list)
    for c in speed:
        by_shape[c.shape].append(c)
    for shape, cells in sorted(by_shape.items()):
        ms = all_ms or [c.m for c in cells]
        for word, label in (("slower", "slower than stock"), ("faster", "faster than stock"),
                            ("within noise", "within noise of stock")):
            hit = [c for c in cells if c.versus_stock == word]
            if not hit:
                continue
            sps = [c.speedup for c in hit if c.speedup is not None]
            rng = f"x{min(sps):.2f}" if len(set(sps)) == 1 else f"x{min(sps):.2f}-{max(sps):.2f}"
            phrase = "every M" if len(hit) == len(set(ms)) else _ms_phrase([c.m for c in hit], ms)
            out.append(f"{shape}: {label} at {phrase} ({rng})")
        configs = {config_key(c.config) for c in cells}
        if len(configs) > 1:
            per = ", ".join(f"M={c.m} {config_key(c.config)}" for c in cells)
            out.append(f"{shape}: the best config changes with M ({per}): winners are kept per batch bucket")
        low = [c for c in cells if c.frac_of_floor is not None and c.frac_of_floor < 0.5]
        if low:
            worst = min(low, key=lambda c: c.frac_of_floor or 0.0)
            out.append(f"{shape}: the best run reaches only {100 * (worst.frac_of_floor or 0):.0f}% of the "
                       f"memory-bandwidth floor at M={worst.m}: "
                       "decode GEMMs are memory-bound, so wider loads and more parallel work over K (split-K) "
                       "have room")
    return out
