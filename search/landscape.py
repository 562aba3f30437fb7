"""Recorded landscapes: every valid config of one variant timed at every M, replayed without a GPU.

A landscape file (JSON, under bench/landscapes/) holds metadata (slot, variant, language, shape, Ms,
hardware fingerprint, date, commit, command, and whether the numbers are ``measured`` on a device or
``synthetic``) and one record per (config, M). Replaying it answers Outcomes as a worker would, which
lets CI test strategies and the distributed loop with no GPU.

``synthetic_gemm_landscape`` makes a landscape from a roofline model (documented below). Its numbers
are marked ``source: "synthetic"`` and must never be presented as measurements.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from search.space import Config, ConfigSpace
from search.strategies.base import OK, Fidelity, Outcome

# A short timing uses about a ninth of a full bench's replays, so the spread of its median is ~3x wider.
SHORT_SPREAD_FACTOR = 3.0
# p10..p90 of a normal distribution spans 2 * 1.2816 standard deviations.
P10_P90_SIGMAS = 2 * 1.2816


class LandscapeError(ValueError):
    pass


class LandscapeMeta(BaseModel):
    slot: str
    variant: str
    language: str
    shape: dict[str, Any]  # the slot's dims (N, K, ...) without M
    ms: list[int] = Field(min_length=1)
    hardware: dict[str, Any]  # device fingerprint (name, arch, SMs, clocks, driver, versions) or the model
    date: str
    commit: str
    command: str
    source: Literal["measured", "synthetic"]
    space: dict[str, Any]  # the variant's config space, as submitted
    limits: dict[str, Any] = Field(default_factory=dict)  # device limits the constraints read
    notes: str = ""


class LandscapeRecord(BaseModel):
    config: Config
    m: int
    verdict: str  # "ok" or the failing stage's verdict
    median_us: float | None = None
    baseline_median_us: float | None = None
    p10_us: float | None = None
    p90_us: float | None = None
    short_median_us: float | None = None
    cost_s: float = 0.0
    short_cost_s: float | None = None


def _device_key(hardware: Mapping[str, Any]) -> str:
    return str(hardware.get("hardware_key") or hardware.get("name") or hardware)


class Landscape:
    def __init__(self, meta: LandscapeMeta, records: Sequence[LandscapeRecord]) -> None:
        self.meta = meta
        self.records = list(records)
        self._index: dict[tuple[str, int], LandscapeRecord] = {}
        for r in self.records:
            key = (ConfigSpace.canonical(r.config), r.m)
            if key in self._index:
                raise LandscapeError(f"duplicate record for {key}")
            self._index[key] = r

    # -- files -----------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> "Landscape":
        data = json.loads(Path(path).read_text())
        return cls(LandscapeMeta.model_validate(data["meta"]),
                   [LandscapeRecord.model_validate(r) for r in data["records"]])

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"meta": self.meta.model_dump(), "records": [r.model_dump(exclude_none=True) for r in self.records]}
        path.write_text(json.dumps(data, indent=1) + "\n")
        return path

    @classmethod
    def merge(cls, parts: Sequence["Landscape"]) -> "Landscape":
        """One landscape from several recorded at different Ms (one device step per M) of the same variant,
        shape, space and device, so a strategy benchmark can seed one M from another (transfer)."""
        if not parts:
            raise LandscapeError("nothing to merge")
        first = parts[0].meta
        same = ("slot", "variant", "language", "shape", "space", "limits")
        for part in parts[1:]:
            for field in same:
                if getattr(part.meta, field) != getattr(first, field):
                    raise LandscapeError(f"cannot merge: {field} differs ({getattr(part.meta, field)!r} vs "
                                         f"{getattr(first, field)!r})")
            if _device_key(part.meta.hardware) != _device_key(first.hardware):
                raise LandscapeError(f"cannot merge: recorded on {_device_key(part.meta.hardware)} and "
                                     f"{_device_key(first.hardware)}")
        ms = [m for part in parts for m in part.meta.ms]
        if len(ms) != len(set(ms)):
            raise LandscapeError(f"cannot merge: an M is in more than one landscape ({sorted(ms)})")
        meta = first.model_copy(update={
            "ms": sorted(ms), "date": max(p.meta.date for p in parts),
            "commit": "+".join(p.meta.commit for p in parts), "command": " ; ".join(p.meta.command for p in parts),
            "source": "measured" if all(p.meta.source == "measured" for p in parts) else "synthetic",
            "notes": "merged (search/landscape.py Landscape.merge) from: "
                     + " | ".join(f"M={p.meta.ms}: {p.meta.notes}" for p in parts)})
        return cls(meta, [r for p in parts for r in p.records])

    # -- the space this landscape covers ---------------------------------------------------------
    def space(self) -> ConfigSpace:
        return ConfigSpace.parse(self.meta.space)

    def _coverage(self) -> tuple[dict[int, set[str]], dict[int, set[str]]]:
        """Per M, the canonical keys of the valid configs and of the configs with a record."""
        valid = {m: {ConfigSpace.canonical(c) for c in self.configs(m)} for m in self.meta.ms}
        have = {m: {ConfigSpace.canonical(r.config) for r in self.records if r.m == m} for m in self.meta.ms}
        return valid, have

    def is_complete(self) -> bool:
        """Every valid point measured at every M (a step cut short on the device leaves some out)."""
        valid, have = self._coverage()
        return all(valid[m] <= have[m] for m in self.meta.ms)

    def measured_subspace(self) -> "Landscape":
        """A landscape cut short on the device (some valid points never measured) narrowed to a space
        of exactly the points it holds at every M: value lists keep only measured values, and one
        constraint per missing point excludes it. Its meta says so; the records are unchanged."""
        valid_at, have = self._coverage()
        keep = set.intersection(*(have[m] & valid_at[m] for m in self.meta.ms))
        valid = self.configs(self.meta.ms[0])
        if not keep:
            raise LandscapeError("no config was measured at every M")
        kept = [c for c in valid if ConfigSpace.canonical(c) in keep]
        values = {name: [v for v in vals if any(c[name] == v for c in kept)]
                  for name, vals in self.space().params.items()}
        narrowed = {**values, "constraints": list(self.meta.space.get("constraints", []))}
        for c in valid:
            if ConfigSpace.canonical(c) not in keep and all(c[n] in values[n] for n in values):
                narrowed["constraints"].append("not (" + " and ".join(f"{n} == {c[n]!r}" for n in sorted(c)) + ")")
        meta = self.meta.model_copy(update={
            "space": narrowed,
            "notes": (self.meta.notes + f" | narrowed to the {len(keep)} points measured at every M "
                      f"(of {len(valid)} valid): search/landscape.py measured_subspace").strip(" |")})
        return Landscape(meta, [r for r in self.records if ConfigSpace.canonical(r.config) in keep])

    def shape_for(self, ms: int | Sequence[int]) -> dict[str, Any]:
        """The shape a strategy searches with. For a bucket of several Ms, constraints on M see the
        largest one (the recording covers every config valid there at every M, or replay raises)."""
        ms = [ms] if isinstance(ms, int) else list(ms)
        return {**self.meta.shape, "M": max(ms)}

    def configs(self, ms: int | Sequence[int]) -> list[Config]:
        return list(self.space().points(self.shape_for(ms), self.meta.limits))

    def record(self, config: Mapping[str, Any], m: int) -> LandscapeRecord:
        try:
            return self._index[(ConfigSpace.canonical(config), m)]
        except KeyError:
            raise LandscapeError(f"no record for config {dict(config)} at M={m}") from None

    # -- answers ---------------------------------------------------------------------------------
    def objective(self, config: Mapping[str, Any], ms: int | Sequence[int]) -> float | None:
        """Noise-free objective: the sum of recorded medians over ``ms`` (a bucket's step time), or
        None if the config failed at any of them (a winner must pass at every M of its bucket)."""
        ms = [ms] if isinstance(ms, int) else list(ms)
        total = 0.0
        for m in ms:
            r = self.record(config, m)
            if r.verdict != OK or r.median_us is None:
                return None
            total += r.median_us
        return total

    def exhaustive_best(self, ms: int | Sequence[int]) -> tuple[Config, float]:
        best: tuple[Config, float] | None = None
        for config in self.configs(ms):
            v = self.objective(config, ms)
            if v is not None and (best is None or v < best[1]):
                best = (config, v)
        if best is None:
            raise LandscapeError(f"no config passed at M={ms}")
        return best

    def baseline(self, ms: int | Sequence[int]) -> float | None:
        """The stock baseline's summed median over ``ms``, from any record that has it."""
        ms = [ms] if isinstance(ms, int) else list(ms)
        total = 0.0
        for m in ms:
            values = [r.baseline_median_us for r in self.records if r.m == m and r.baseline_median_us]
            if not values:
                return None
            total += float(np.median(values))
        return total

    def outcome(self, config: Mapping[str, Any], ms: int | Sequence[int], fidelity: Fidelity = "full",
                rng: np.random.Generator | None = None) -> Outcome:
        """What a worker would answer for ``config`` over ``ms``. With ``rng`` each median is redrawn
        from a normal whose p10..p90 matches the recorded spread (wider for a short timing)."""
        ms = [ms] if isinstance(ms, int) else list(ms)
        total_us, cost = 0.0, 0.0
        for m in ms:
            r = self.record(config, m)
            short = fidelity == "short"
            cost += (r.short_cost_s if short and r.short_cost_s is not None else r.cost_s)
            if r.verdict != OK or r.median_us is None:
                return Outcome.failure(r.verdict, cost_s=cost, m=m)
            value = r.short_median_us if short and r.short_median_us is not None else r.median_us
            if rng is not None and r.p10_us is not None and r.p90_us is not None:
                sigma = (r.p90_us - r.p10_us) / P10_P90_SIGMAS * (SHORT_SPREAD_FACTOR if short else 1.0)
                value = max(value + sigma * float(rng.standard_normal()), 0.5 * value)
            total_us += value
        return Outcome.success(total_us, cost_s=cost)


# -- a synthetic landscape -----------------------------------------------------------------------
# Roofline of an H200 (public figures; the HBM figure is DESIGN.md's measured copy bandwidth).
H200_MODEL = {"name": "synthetic roofline model of an NVIDIA H200", "sms": 132, "hbm_bytes_per_s": 4.22e12,
              "bf16_flops_per_s": 989e12, "smem_bytes_per_block": 227 * 1024, "launch_us": 2.5}


def _config_jitter(config: Mapping[str, Any], m: int, seed: int) -> float:
    """A stable per-(config, M) factor in [0, 1): what a roofline cannot predict (bank conflicts,
    instruction scheduling) made reproducible."""
    digest = hashlib.sha256(f"{seed}:{m}:{ConfigSpace.canonical(config)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2**64


def synthetic_gemm_time(config: Mapping[str, Any], dims: Mapping[str, int], m: int, *, seed: int = 0,
                        hw: Mapping[str, Any] = H200_MODEL) -> tuple[str, float | None]:
    """(verdict, microseconds) of a GEMM y[M,N] = x[M,K] W[N,K]^T variant under a roofline model:

        time = max(bytes / bandwidth, flops / peak) / efficiency(config) + launch (+ a split-K reduce)

    efficiency = pipelining (num_stages) x warps (best at 4) x BLOCK_K (best at 128) x SM utilisation
    (tiles over waves of SMs: too few tiles leave SMs idle, a partial last wave wastes the rest) x a
    seeded per-config jitter of +-6%. Split-K adds fp32 partials to the bytes and a reduce launch.
    Failures: shared memory over the per-block limit or more than 256 fp32 accumulators per thread
    -> compile_error; a seeded ~2% -> check_failed (a variant bug at some tile shapes)."""
    bm = int(config.get("BLOCK_M", 16))
    bn, bk = int(config.get("BLOCK_N", 64)), int(config.get("BLOCK_K", 64))
    split_k, warps = int(config.get("SPLIT_K", 1)), int(config.get("num_warps", 4))
    stages = int(config.get("num_stages", 3))
    n, k = int(dims["N"]), int(dims["K"])
    smem = (bm + bn) * bk * 2 * stages
    if smem > hw["smem_bytes_per_block"]:
        return "compile_error", None
    if bm * bn / (warps * 32) > 256:
        return "compile_error", None
    jitter = _config_jitter(config, m, seed)
    if _config_jitter(config, 0, seed + 1) < 0.02:
        return "check_failed", None
    bytes_moved = 2 * (m * k + n * k + m * n) + (8 * m * n * split_k if split_k > 1 else 0)
    flops = 2 * m * n * k
    tiles = math.ceil(m / bm) * math.ceil(n / bn) * split_k
    waves = math.ceil(tiles / hw["sms"])
    utilisation = tiles / (waves * hw["sms"])
    pipelining = 1.0 - 0.6 * math.exp(-(stages - 1) / 1.3)
    warp_eff = 1.0 - 0.08 * abs(math.log2(warps / 4))
    k_eff = 1.0 - 0.10 * abs(math.log2(bk / 128))
    # Each CTA walks K / (BLOCK_K * SPLIT_K) steps; too few steps and the pipeline never fills.
    steps = max(k / (bk * split_k), 1.0)
    fill = steps / (steps + stages)
    efficiency = pipelining * warp_eff * k_eff * fill * (0.1 + 0.9 * utilisation) * (0.94 + 0.12 * jitter)
    floor_s = max(bytes_moved / hw["hbm_bytes_per_s"], flops / hw["bf16_flops_per_s"])
    us = floor_s / efficiency * 1e6 + hw["launch_us"] + (2.0 if split_k > 1 else 0.0)
    return "ok", us


def synthetic_gemm_landscape(space_json: Mapping[str, Any], dims: Mapping[str, int], ms: Sequence[int], *,
                             seed: int = 0, variant: str = "synthetic_gemm", command: str = "",
                             limits: Mapping[str, Any] | None = None) -> Landscape:
    """Every valid config of ``space_json`` at every M under ``synthetic_gemm_time``, with a stock
    baseline at 25% of the HBM floor (DESIGN.md measures torch at 17-53% on these GEMMs), a p10..p90
    spread of 1-4%, and a short-fidelity median off by up to ~4%."""
    space = ConfigSpace.parse(dict(space_json))
    rng = np.random.default_rng(seed)
    hw = H200_MODEL
    records: list[LandscapeRecord] = []
    for m in ms:
        n, k = int(dims["N"]), int(dims["K"])
        floor_us = 2 * (m * k + n * k + m * n) / hw["hbm_bytes_per_s"] * 1e6
        baseline = floor_us / 0.25 + 4.0
        for config in space.points({**dims, "M": m}, limits):
            verdict, us = synthetic_gemm_time(config, dims, m, seed=seed, hw=hw)
            if us is None:
                records.append(LandscapeRecord(config=config, m=m, verdict=verdict, cost_s=1.5, short_cost_s=1.5))
                continue
            spread = us * float(rng.uniform(0.01, 0.04))
            records.append(LandscapeRecord(
                config=config, m=m, verdict=verdict, median_us=us, baseline_median_us=baseline,
                p10_us=us - spread / 2, p90_us=us + spread / 2,
                short_median_us=us * (1.0 + float(rng.normal(0.0, 0.02))), cost_s=4.0, short_cost_s=1.8))
    meta = LandscapeMeta(
        slot="dense_gemm", variant=variant, language="synthetic", shape=dict(dims), ms=list(ms),
        hardware=dict(hw), date=dt.date.today().isoformat(), commit=git_commit(), command=command,
        source="synthetic", space=space.to_json(), limits=dict(limits or {}),
        notes=f"synthetic_gemm_landscape(seed={seed}): roofline model, not a measurement")
    return Landscape(meta, records)


def git_commit(cwd: str | Path | None = None) -> str:
    """The commit a results file names: KT_COMMIT where the caller set it (a device call: the device's copy of .git
    can lag the tree that travelled), else HEAD, with "+dirty" where tracked files differ from it, or "unknown"."""
    if os.environ.get("KT_COMMIT"):
        return os.environ["KT_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=cwd, timeout=10)
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                                text=True, cwd=cwd, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + ("+dirty" if status.returncode == 0 and status.stdout.strip() else "")
