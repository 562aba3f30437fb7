"""The replay device: a worker started with ``KT_DEVICE=replay:<landscape.json>`` answers runs from a
recorded Landscape (search.landscape) instead of a GPU: the recorded verdict and timings of (config, M),
shaped as a RunResult, with no sandbox child. CI tests strategies and the whole distributed loop
(API -> driver -> broker -> workers -> DB) with real Celery workers this way.

Every answer is marked: the fingerprint's hardware class is ``replay`` (so replayed numbers can never
rank among a real device's winners: record_result refuses a class that differs from the run's queue),
``replay: true``, the landscape file, its source (``measured`` or ``synthetic``) and the recorded
device's fingerprint under ``recorded_hardware``.

Environment:
    KT_REPLAY_DELAY_S   seconds each answer takes (default 0): makes queueing and distribution
                        overhead measurable (bench/search_distribution.py)
    KT_REPLAY_NOISE     1 (default): redraw each median from the recorded p10..p90 spread, seeded by the
                        run's seed (reproducible per run); 0: the recorded medians exactly
    KT_REPLAY_LOG       a file to append one JSON line per answered run (tests count re-runs with it)
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from workers.protocol import BenchStage, CheckStage, CompileStage, RunResult, Verdict

if TYPE_CHECKING:
    from search.landscape import Landscape

PREFIX = "replay:"
HARDWARE_CLASS = "replay"
# Landscape verdicts are "ok" or the failing stage's name; the harness' verdicts are kept as they are.
_VERDICTS = {"ok": Verdict.passed, "compile_error": Verdict.compile_failed}


def is_replay(device: str) -> bool:
    return device.startswith(PREFIX)


def landscape_path(device: str) -> Path:
    path = device[len(PREFIX):]
    if not path:
        raise ValueError("KT_DEVICE=replay:<path> needs the landscape file's path")
    return Path(path).expanduser()


@dataclass(frozen=True)
class ReplayRequest:
    """What the replay needs from a run (read from the database by the task)."""

    run_id: str
    config: dict[str, Any]
    shape: dict[str, Any]  # Shape.to_json()
    m: int
    seed: int
    fidelity: str = "full"


_cache: dict[Path, tuple[float, Landscape]] = {}
_cache_lock = threading.Lock()


def load(path: Path) -> Landscape:
    """The landscape, parsed once per process (again if the file changes)."""
    from search.landscape import Landscape  # the search package loads only in replay workers

    path = path.resolve()
    mtime = path.stat().st_mtime
    with _cache_lock:
        hit = _cache.get(path)
        if hit is None or hit[0] != mtime:
            hit = (mtime, Landscape.load(path))
            _cache[path] = hit
        return hit[1]


def fingerprint(landscape: Landscape, path: Path) -> dict[str, Any]:
    meta = landscape.meta
    digest = hashlib.sha256(json.dumps(meta.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()[:16]
    recorded = meta.hardware
    return {"hardware_key": f"replay-{digest}", "hardware_class": HARDWARE_CLASS, "replay": True,
            "name": f"replay of {recorded.get('name', 'a recorded device')}", "landscape": path.name,
            "landscape_source": meta.source, "landscape_date": meta.date, "landscape_commit": meta.commit,
            "recorded_hardware": recorded}


def _error(req: ReplayRequest, code: str, reason: str, started: datetime, fp: dict[str, Any]) -> RunResult:
    return RunResult(run_id=req.run_id, verdict=Verdict.error, reason_code=code, reason=reason, fingerprint=fp,
                     started_at=started, finished_at=datetime.now(timezone.utc))


def answer(device: str, req: ReplayRequest) -> RunResult:
    """The RunResult the recorded device gave for (config, M). A run the landscape cannot answer (other
    shape, config not recorded) is verdict ``error``: a fault of the setup, never of the variant."""
    from search.landscape import LandscapeError

    started = datetime.now(timezone.utc)
    path = landscape_path(device)
    landscape = load(path)
    fp = fingerprint(landscape, path)
    dims = dict(req.shape.get("dims", {}))
    if any(dims.get(k) != v for k, v in landscape.meta.shape.items()):
        return _error(req, "replay_shape_mismatch", f"landscape {path.name} records shape {landscape.meta.shape}; "
                      f"run {req.run_id} is for {req.shape.get('name')} {dims}", started, fp)
    try:
        record = landscape.record(req.config, req.m)
    except LandscapeError as exc:
        return _error(req, "replay_no_record", f"landscape {path.name}: {exc}", started, fp)

    delay = float(os.environ.get("KT_REPLAY_DELAY_S") or 0.0)
    if delay > 0:
        time.sleep(delay)
    short = req.fidelity == "short"
    cost = record.short_cost_s if short and record.short_cost_s is not None else record.cost_s
    verdict = _VERDICTS.get(record.verdict) or (Verdict(record.verdict) if record.verdict in Verdict.__members__
                                                else Verdict.error)
    result = RunResult(run_id=req.run_id, verdict=verdict, fingerprint=fp, started_at=started,
                       # The recorded device time, not this process's: budgets in GPU-seconds replay as spent.
                       child_wall_s=cost, compile=CompileStage(ok=verdict != Verdict.compile_failed,
                                                               backend="replay"))
    if verdict != Verdict.passed or record.median_us is None:
        result.reason_code = f"replay_{record.verdict}"
        result.reason = f"recorded verdict {record.verdict!r} for this config at M={req.m} ({path.name})"
        if verdict == Verdict.passed:  # "ok" without a median: the recording is broken, not the variant
            result.verdict, result.reason_code = Verdict.error, "replay_no_median"
    else:
        result.check = CheckStage(passed=True)
        result.bench = _bench(landscape, record, req, short)
    result.finished_at = datetime.now(timezone.utc)
    _log(req, result)
    return result


def _bench(landscape: Landscape, record: Any, req: ReplayRequest, short: bool) -> BenchStage:
    from search.landscape import P10_P90_SIGMAS, SHORT_SPREAD_FACTOR

    median = record.short_median_us if short and record.short_median_us is not None else record.median_us
    p10 = record.p10_us if record.p10_us is not None else median
    p90 = record.p90_us if record.p90_us is not None else median
    spread = (p90 - p10) * (SHORT_SPREAD_FACTOR if short else 1.0)
    if os.environ.get("KT_REPLAY_NOISE", "1") != "0" and spread > 0:
        rng = np.random.default_rng([req.seed, req.m])
        median = max(median + spread / P10_P90_SIGMAS * float(rng.standard_normal()), 0.5 * median)
    p10, p90 = median - spread / 2, median + spread / 2
    baseline = record.baseline_median_us or landscape.baseline(req.m) or median
    dims = req.shape.get("dims", {})
    n, k, m = int(dims.get("N", 0)), int(dims.get("K", 0)), req.m
    bytes_moved = 2 * (m * k + n * k + m * n)  # a GEMM's bf16 operands; 0 for shapes without N and K
    hw = landscape.meta.hardware
    bandwidth = float(hw.get("hbm_bytes_per_s") or 0.0) or float(hw.get("bandwidth_gbs") or 0.0) * 1e9
    floor_us = bytes_moved / bandwidth * 1e6 if bandwidth and bytes_moved else 0.0
    cv = (p90 - p10) / P10_P90_SIGMAS / median
    return BenchStage(timer="replay", seed=req.seed, input_sets=0, set_bytes=0, llc_bytes=0, median_us=median,
                      p10_us=p10, p90_us=p90, cv=cv, n=1, baseline_median_us=baseline, baseline_p10_us=baseline,
                      baseline_p90_us=baseline, baseline_cv=0.0, speedup=baseline / median,
                      speedup_ci_lo=baseline / p90, speedup_ci_hi=baseline / max(p10, 1e-9), floor_us=floor_us,
                      frac_of_floor=floor_us / median if floor_us else 0.0, bytes_moved=bytes_moved,
                      bandwidth_gbs=bandwidth / 1e9)


def _log(req: ReplayRequest, result: RunResult) -> None:
    path = os.environ.get("KT_REPLAY_LOG")
    if not path:
        return
    line = json.dumps({"run_id": req.run_id, "config_key": json.dumps(req.config, sort_keys=True, separators=(",", ":")), "m": req.m,
                       "fidelity": req.fidelity, "verdict": str(result.verdict), "pid": os.getpid(),
                       "at": time.time()}) + "\n"
    with open(path, "a") as fh:  # several workers append to one file: one locked write per line
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write(line)
        fcntl.flock(fh, fcntl.LOCK_UN)
