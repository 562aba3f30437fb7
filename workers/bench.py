"""The bench stage: the variant and the stock baseline timed in the same process, interleaved, over
rotating input sets larger than twice the last-level cache; statistics, speedup with a paired
bootstrap CI, and the fraction of the memory-bandwidth floor.

Where the clock is read: workers/timers/cpu.py and workers/timers/cuda.py. What the timed calls
wrote is re-checked here afterwards (workers/check.py: recheck_timed).
"""

from __future__ import annotations

import math
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from kernels.slots.base import Shape, Slot
from workers import stats
from workers.check import hash_tensors, recheck_timed
from workers.failures import Failure
from workers.fingerprint import llc_bytes
from workers.protocol import BenchSettings, BenchStage, Trial, Verdict
from workers.timers import StreamEscape, timer_for

# Bound at import, before any variant exists (workers/tamper.py checks nobody rebinds the originals).
_summarize = stats.summarize
_bootstrap = stats.bootstrap_speedup_ci

# A median below this fraction of the bandwidth floor is not a real measurement. On a GPU the copy
# bandwidth is a hard ceiling for the bytes a kernel must move; on a CPU it is only an estimate
# (read-mostly streams beat copy bandwidth, other processes share the memory bus), so the bound is looser.
IMPLAUSIBLE_FRACTION = {"cuda": 0.85, "cpu": 0.4}


class _ControlFailed(Exception):
    """The incumbent raised while timed: it is left out and the rounds start again without it."""


@dataclass
class BenchContext:
    slot: Slot
    shape: Shape
    m: int
    device: torch.device
    fn: Callable[..., None]
    settings: BenchSettings
    seed: int
    bandwidth_gbs: float
    verify: Callable[[], None]
    # the bucket's incumbent (RunSpec.control): its run, built for this shape and M and timed in the same rounds,
    # or why it did not build
    control_run_id: str | None = None
    control_fn: Callable[..., None] | None = None
    control_error: str | None = None


def memory_budget_bytes(device: torch.device) -> int:
    """A quarter of what is free: rotating sets must not push the child into its memory limit."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0] // 4
    avail = 8 << 30
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except OSError:
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        avail = min(avail, soft)
    return avail // 4


def choose_input_sets(set_bytes: int, llc: int, budget: int, settings: BenchSettings) -> int:
    if settings.input_sets is not None:
        return settings.input_sets
    wanted = math.ceil(2 * llc / max(set_bytes, 1)) + 1  # strictly more than 2x the LLC
    return max(2, min(wanted, settings.max_input_sets, budget // max(set_bytes, 1)))


def run_bench(ctx: BenchContext) -> tuple[BenchStage, Trial]:
    t_start = time.perf_counter()
    slot, shape, m = ctx.slot, ctx.shape, ctx.m
    llc = llc_bytes(ctx.device)
    set_bytes = slot.bytes_moved(shape, m)
    n_sets = choose_input_sets(set_bytes, llc, memory_budget_bytes(ctx.device), ctx.settings)
    sets = slot.input_sets(shape, m, ctx.seed, ctx.device, n_sets)
    hashes = [hash_tensors(s) for s in sets]
    outs = {"variant": [slot.alloc_outputs(shape, m, ctx.device) for _ in sets],
            "stock": [slot.alloc_outputs(shape, m, ctx.device) for _ in sets]}
    fns = {"variant": ctx.fn, "stock": slot.stock(shape, m)}
    control_error = ctx.control_error or _add_control(ctx, sets[0], fns, outs)

    def runner(name: str) -> Callable[[int], None]:
        fn, out = fns[name], outs[name]

        def run(i: int) -> None:
            try:
                fn(**sets[i], **out[i])
            except StreamEscape:
                raise
            except Exception as exc:
                if name == "control":
                    raise _ControlFailed(f"{type(exc).__name__}: {exc}") from exc
                if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
                    raise  # the CUDA timer names a failure during capture
                raise Failure(Verdict.crashed, "variant_exception" if name == "variant" else "stock_exception",
                              f"{name} raised during the bench: {type(exc).__name__}: {exc}") from exc
        return run

    def poison(name: str, i: int) -> None:
        slot.poison(outs[name][i])

    timer = timer_for(ctx.device, ctx.settings)
    # A stock that syncs with the host is timed eagerly where the timer captures graphs (CUDA).
    stock_captured = slot.stock_capturable or ctx.device.type != "cuda"
    eager = frozenset() if stock_captured else frozenset({"stock"})
    try:
        try:
            samples, written = timer.measure({n: runner(n) for n in fns}, poison, n_sets, ctx.settings, eager)
        except _ControlFailed as exc:  # the incumbent's fault, never the variant's: time again without it
            control_error = f"the incumbent raised while timed: {exc}"
            del fns["control"]
            samples, written = timer.measure({n: runner(n) for n in fns}, poison, n_sets, ctx.settings, eager)
    except StreamEscape as exc:
        raise Failure(Verdict.rejected, "stream_escape", str(exc)) from exc
    ctx.verify()

    timed_trial = recheck_timed(slot, shape, sets, outs["variant"], written["variant"], hashes, ctx.seed)
    v = _summarize(samples["variant"])
    b = _summarize(samples["stock"])
    lo, hi = _bootstrap(samples["variant"], samples["stock"], resamples=ctx.settings.bootstrap, seed=ctx.seed)
    floor_us = set_bytes / (ctx.bandwidth_gbs * 1e9) * 1e6
    stage = BenchStage(
        timer=timer.name, baseline_timer=timer.name if stock_captured else "eager",
        seconds=time.perf_counter() - t_start,
        threads=torch.get_num_threads() if ctx.device.type == "cpu" else None,
        seed=ctx.seed, input_sets=n_sets, set_bytes=set_bytes, llc_bytes=llc,
        median_us=v.median, p10_us=v.p10, p90_us=v.p90, cv=v.cv, n=v.n,
        baseline_median_us=b.median, baseline_p10_us=b.p10, baseline_p90_us=b.p90, baseline_cv=b.cv,
        speedup=b.median / max(v.median, 1e-6), speedup_ci_lo=lo, speedup_ci_hi=hi,
        floor_us=floor_us, frac_of_floor=floor_us / max(v.median, 1e-6),
        bytes_moved=set_bytes, bandwidth_gbs=ctx.bandwidth_gbs,
        control_run_id=ctx.control_run_id, control_error=control_error)
    if "control" in samples:
        c = _summarize(samples["control"])
        lo_c, hi_c = _bootstrap(samples["variant"], samples["control"], resamples=ctx.settings.bootstrap, seed=ctx.seed)
        stage.control_median_us = c.median
        stage.vs_control, stage.vs_control_ci_lo, stage.vs_control_ci_hi = c.median / max(v.median, 1e-6), lo_c, hi_c
    implausible = IMPLAUSIBLE_FRACTION.get(ctx.device.type, 0.85)
    if v.median < implausible * floor_us:
        raise Failure(Verdict.rejected, "implausible_timing",
                      f"variant median {v.median:.2f} us is below {implausible} x the bandwidth floor "
                      f"{floor_us:.2f} us ({set_bytes} bytes at {ctx.bandwidth_gbs:.1f} GB/s)", bench=stage)
    return stage, timed_trial


def _add_control(ctx: BenchContext, first_set: dict, fns: dict, outs: dict) -> str | None:
    """Adds the incumbent to the timed implementations after one untimed call on the first input set; returns
    why it was left out, if it was. Its outputs are not checked: it passed its own run, and here it is only a
    clock reference for ranking (db/queries/runs.py ranked_us)."""
    if ctx.control_fn is None:
        return None
    out = [ctx.slot.alloc_outputs(ctx.shape, ctx.m, ctx.device) for _ in outs["variant"]]
    try:
        ctx.control_fn(**first_set, **out[0])
        if ctx.device.type == "cuda":
            torch.cuda.synchronize(ctx.device)
    except Exception as exc:
        return f"the incumbent raised on its first call: {type(exc).__name__}: {exc}"
    fns["control"], outs["control"] = ctx.control_fn, out
    return None
