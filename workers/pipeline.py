"""Inside the child: compile -> check -> bench, each timed, turned into one RunResult.

Order matters and is all here:
  1. trusted phase: slot, backend, fingerprint, bandwidth (nothing of the variant exists yet);
  2. seal: install the audit hook, capture the tamper guard (identities of timers, statistics, checker);
  3. compile: load the variant source and build it for (config, shape, M, device);
  4. check (workers/check.py) beside other runs' checks (once more alone if the device ran out of memory), library
     policy, bench (workers/bench.py) with the device to itself and its post-bench re-check;
  5. after any outcome: the guard and the audit log can still turn it into ``rejected``.
"""

from __future__ import annotations

import fcntl
import gc
import hashlib
import sys
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

import numpy
import torch
import torch.nn.functional
import torch.profiler

import kernels.slots.base
import workers.audit
import workers.bench
import workers.chain
import workers.check
import workers.failures
import workers.gpu_lock
import workers.stats
import workers.tamper
import workers.timers
import workers.timers.cpu
import workers.timers.cuda
from kernels.backends.compile_cache import configure_language_caches
from kernels.backends.base import CompileError, NeedsDevice, line_in_source, load_module
from kernels.catalogue import get_slot
from kernels.slots.base import Shape, Slot
from workers import audit, tamper
from workers.bench import BenchContext, run_bench
from workers import chain
from workers.check import CheckContext, run_check
from workers.failures import Failure
from workers.fingerprint import bandwidth_key, fingerprint, measure_bandwidth_gbs
from workers.gpu_lock import DeviceLock
from workers.languages import get_backend
from workers.protocol import CheckStage, CompileStage, RunResult, RunSpec, Verdict


@dataclass
class ChildEnv:
    """What the worker tells the child besides the spec."""

    workdir: str
    bandwidth_cache: dict[str, Any] = field(default_factory=dict)
    device_lock: str | None = None  # workers/gpu_lock.py: None when this run has the device to itself
    lock_wait_log: str | None = None  # where the lock records its waits for the worker's clock


def derive_seed(base: int, label: str) -> int:
    return int(hashlib.blake2b(f"{base}:{label}".encode(), digest_size=4).hexdigest(), 16)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _guarded(slot: Slot) -> Callable[[], None]:
    harness = [kernels.slots.base, sys.modules[type(slot).__module__], workers.audit, workers.bench, workers.chain,
               workers.check, workers.failures, workers.gpu_lock, workers.stats, workers.tamper, workers.timers, workers.timers.cpu,
               workers.timers.cuda, sys.modules[__name__]]
    libraries = [fcntl, time, torch, torch.cuda, torch.nn.functional, torch.profiler, numpy]
    classes = [torch.Tensor, torch.cuda.Event, torch.cuda.CUDAGraph, torch.profiler.profile, type(slot)]
    return tamper.capture(harness, libraries, classes)


def _warm_profiler(device: torch.device) -> None:
    """The first profile imports torch._dynamo, which rebinds torch.manual_seed, and starts Kineto
    (seconds): do both before the tamper guard's snapshot, not inside the check."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities):
        torch.zeros(1, device=device).add_(1)


def run_in_child(spec: RunSpec, env: ChildEnv) -> RunResult:
    result = RunResult(run_id=spec.run_id, verdict=Verdict.error, started_at=_now())
    verify: Callable[[], None] | None = None
    refusals: Callable[[], list[dict[str, str]]] = lambda: []
    try:
        # 1. trusted phase
        device = torch.device(spec.device)
        torch.set_num_threads(spec.bench.cpu_threads)
        slot = get_slot(spec.slot)
        shape = Shape.from_json(spec.shape)
        fp = fingerprint(device, torch.get_num_threads())
        key = bandwidth_key(fp)
        cached = env.bandwidth_cache.get(key, {}).get("bandwidth_gbs")
        lock = DeviceLock(env.device_lock, env.lock_wait_log)  # opened before the seal: the variant never opens it
        if cached:
            bandwidth = float(cached)
        else:
            with lock.exclusive():
                bandwidth = measure_bandwidth_gbs(device)
        result.bandwidth_measured = not cached
        result.fingerprint = {**fp, "bandwidth_key": key, "bandwidth_gbs": bandwidth}
        configure_language_caches()  # before triton / cutlass are imported: they bind their cache dirs
        try:
            backend = get_backend(spec.language)
        except CompileError as exc:
            result.compile = CompileStage(ok=False, log=str(exc))
            return _end(result, Verdict.compile_failed, "backend_unavailable", str(exc))
        # the incumbent's backend too, while the phase is trusted (its import may be the first of that language)
        control_backend: Any = None
        if spec.control is not None:
            try:
                control_backend = get_backend(spec.control.language)
            except CompileError as exc:
                control_backend = f"the incumbent's backend is unavailable: {exc}"
        with lock.shared():
            if spec.language != "torch" and not spec.declares_library:
                _warm_profiler(device)
        # 2. seal
        refusals = audit.install((env.workdir,))
        verify = _guarded(slot)
        _stages(spec, env, result, slot, shape, device, backend, bandwidth, verify, lock, control_backend)
    except Failure as f:
        _apply_failure(result, f)
    except tamper.Tampered as t:
        _end(result, Verdict.rejected, t.reason_code, f"harness functions rebound by the variant: {t}")
    except (SystemExit, KeyboardInterrupt) as exc:
        _end(result, Verdict.crashed, "variant_exit", f"{type(exc).__name__} raised inside the child: {exc}")
    except Exception:
        _end(result, Verdict.error, "harness_error", traceback.format_exc()[-4000:])
    # 5. whatever the outcome, tampering or a refused operation decides it
    if verify is not None:
        try:
            verify()
        except tamper.Tampered as t:
            _end(result, Verdict.rejected, t.reason_code, f"harness functions rebound by the variant: {t}")
    refused = refusals()
    if refused:
        first = refused[0]
        _end(result, Verdict.rejected, first["code"],
             f"sandbox refused {first['event']} ({first['code'].replace('_', ' ')}): {first['detail']}"
             + (f" and {len(refused) - 1} more" if len(refused) > 1 else ""))
    result.finished_at = _now()
    return result


def _stages(spec: RunSpec, env: ChildEnv, result: RunResult, slot: Slot, shape: Shape, device: torch.device,
            backend: Any, bandwidth: float, verify: Callable[[], None], lock: DeviceLock,
            control_backend: Any = None) -> None:
    # Compile holds no lock: it is host work (seconds for CuTe DSL) and would hold up every timed
    # phase waiting behind it. The check launches kernels, so it runs beside other checks only.
    compiled = _compile(spec, env, result, shape, device, backend, verify)
    if compiled is None:
        return
    module, built, filename = compiled
    check_beside_others(lock, device, lambda: _check(spec, result, slot, shape, device, verify, module, built, filename))
    control_fn, control_error = _build_control(spec, env, shape, device, verify, control_backend)
    with lock.exclusive():  # the timed phase has the device to itself
        bench, timed = run_bench(BenchContext(slot, shape, spec.m, device, built.fn, spec.bench,
                                              derive_seed(spec.seed, "bench"), bandwidth, verify,
                                              spec.control.run_id if spec.control else None, control_fn, control_error))
    assert result.check is not None
    result.check.trials.append(timed)
    result.bench = bench
    _end(result, Verdict.passed, "ok", "compiled, checked and benchmarked")


def release_device_memory(device: torch.device) -> None:
    """Hand the caching allocator's free blocks back to the device, so that other runs' checks can have them."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def check_beside_others(lock: DeviceLock, device: torch.device, check: Callable[[], None]) -> None:
    """The check runs beside other runs' checks. Their inputs and ours together can outgrow the device (twelve
    moe_experts checks, each holding 4 GB of expert weights, ran an 80 GB H100 out of memory): on running out, the
    check runs once more with the device to itself, so contention is neither the variant's verdict nor a lost run.
    Each attempt hands its cached blocks back before it lets go of its lock: a run taking the device right after must
    not find them still held (H100 session 24 call C: a retry with the device "to itself" ran out beside five runs
    that had finished their checks, unlocked, and not yet released their 14.5 GB each)."""
    with lock.shared():
        if not _attempt(check, device, oom_is_an_answer=True):
            return
    with lock.exclusive():
        _attempt(check, device, oom_is_an_answer=False)  # a second running-out is the run's outcome


def _attempt(check: Callable[[], None], device: torch.device, oom_is_an_answer: bool) -> bool:
    """Runs the check: False when it passed, True when it ran the device out of memory and ``oom_is_an_answer``;
    any other exception propagates. Either way the attempt's device memory is handed back before this returns."""
    try:
        check()
        return False
    except Exception as exc:
        drop_frames(exc)  # its traceback's frames hold the attempt's inputs: free them for the release below
        if oom_is_an_answer and workers.failures.device_out_of_memory(exc):
            return True
        raise
    finally:
        release_device_memory(device)


def drop_frames(exc: BaseException) -> None:
    """Clears the locals of the finished frames in the tracebacks of ``exc`` and the exceptions it came from, keeping
    the file and line numbers that reports print."""
    for e in workers.failures.exception_chain(exc):
        traceback.clear_frames(e.__traceback__)


def _compile(spec: RunSpec, env: ChildEnv, result: RunResult, shape: Shape, device: torch.device,
             backend: Any, verify: Callable[[], None]) -> tuple[Any, Any, str] | None:
    """(module, built kernel, source file name) when it compiled; None when a verdict is already set."""
    # 3. compile
    filename = f"{env.workdir}/variant_{spec.source_hash[:12]}.py"
    t0 = time.perf_counter()
    try:
        module = load_module(spec.source, f"kt_variant_{spec.source_hash[:12]}", filename)
        verify()
        built = backend.build(module, dict(spec.config), shape.as_build_arg(spec.m), device)
    except NeedsDevice as exc:
        result.compile = CompileStage(ok=True, seconds=time.perf_counter() - t0, backend=backend.version(), log=str(exc))
        _end(result, Verdict.compiled, "needs_device", f"compiled only; check and bench are waiting for a GPU queue: {exc}")
        return None
    except CompileError as exc:
        result.compile = CompileStage(ok=False, seconds=time.perf_counter() - t0, log=(exc.log or str(exc))[-8000:],
                                      line=exc.line, backend=backend.version())
        code = "syntax_error" if str(exc).startswith("SyntaxError") else "compile_error"
        _end(result, Verdict.compile_failed, code, str(exc) + (f" (line {exc.line})" if exc.line else ""))
        return None
    except Exception as exc:  # a backend that let the variant's exception through
        line = line_in_source(exc, filename)
        result.compile = CompileStage(ok=False, seconds=time.perf_counter() - t0, log=traceback.format_exc()[-8000:],
                                      line=line, backend=backend.version())
        _end(result, Verdict.compile_failed, "compile_error", f"{type(exc).__name__}: {exc}"
             + (f" (line {line})" if line else ""))
        return None
    verify()
    result.compile = CompileStage(ok=True, seconds=time.perf_counter() - t0, cache_hit=built.cache_hit,
                                  log=built.log[-8000:], backend=backend.version())
    return module, built, filename


def _build_control(spec: RunSpec, env: ChildEnv, shape: Shape, device: torch.device, verify: Callable[[], None],
                   backend: Any) -> tuple[Callable[..., None] | None, str | None]:
    """The incumbent (spec.control) built for this shape and M, or why it could not be. Its failure is never
    the variant's: the run is then timed against stock alone and ranked by its own median."""
    control = spec.control
    if control is None:
        return None, None
    if isinstance(backend, str):
        return None, backend
    t0 = time.perf_counter()
    try:
        module = load_module(control.source, f"kt_control_{control.source_hash[:12]}",
                             f"{env.workdir}/control_{control.source_hash[:12]}.py")
        verify()
        built = backend.build(module, dict(control.config), shape.as_build_arg(spec.m), device)
        verify()
    except (tamper.Tampered, Failure):
        raise
    except Exception as exc:
        return None, f"the incumbent did not build ({time.perf_counter() - t0:.1f} s): {type(exc).__name__}: {exc}"[:2000]
    return built.fn, None


def _check(spec: RunSpec, result: RunResult, slot: Slot, shape: Shape, device: torch.device,
           verify: Callable[[], None], module: Any, built: Any, filename: str) -> None:
    """Raises Failure when the kernel is wrong (or calls an undeclared library); returns when it passed."""
    # 4. check
    declared = spec.declares_library or bool(getattr(module, "USES_LIBRARY", False))
    library_is_language = spec.language == "torch"
    t0 = time.perf_counter()
    seeds = [derive_seed(spec.seed, f"check{k}") for k in range(spec.check_trials + 2)]
    ctx = CheckContext(slot, shape, spec.m, device, built.fn, filename, verify,
                       profile_library=not (library_is_language or declared))
    result.check = CheckStage(passed=False)  # filled by a failing step, replaced when all pass
    check, used_library = run_check(ctx, seeds)
    result.check = check  # a failing chained trial below adds its trials to these
    if chain.chainable(module, device):  # the form dispatch(..., pdl=1) ships: checked in its race
        check.trials.extend(_check_chained(spec, slot, shape, device, verify, module, filename))
    check.seconds = time.perf_counter() - t0
    result.uses_library = library_is_language or declared or used_library
    if used_library and not declared:
        check.passed = False
        raise Failure(Verdict.rejected, "undeclared_library_call",
                      f"a {spec.language} variant called library GEMMs ({', '.join(check.library_ops)}) "
                      "without declaring USES_LIBRARY")


def _check_chained(spec: RunSpec, slot: Slot, shape: Shape, device: torch.device, verify: Callable[[], None],
                   module: Any, filename: str) -> list[Any]:
    """The chained build's trials (workers/chain.py); raises Failure when it cannot be built or answers wrong."""
    try:
        chained = module.build(dict(spec.config), shape.as_build_arg(spec.m), pdl=1)
    except Exception as exc:
        line = line_in_source(exc, filename)
        raise Failure(Verdict.check_failed, "chained_build_error", f"build(..., pdl=1) raised {type(exc).__name__}: "
                      f"{exc}" + (f" (line {line})" if line else ""), line=line) from exc
    verify()
    seeds = [derive_seed(spec.seed, f"chain{k}") for k in range(2)]
    return chain.check_chained(slot, shape, spec.m, device, chained, filename, seeds, verify)


def _end(result: RunResult, verdict: Verdict, code: str, reason: str) -> RunResult:
    result.verdict, result.reason_code, result.reason = verdict, code, reason
    return result


def _apply_failure(result: RunResult, f: Failure) -> None:
    if result.check is not None and ("trials" in f.details or "mismatches" in f.details):
        result.check.passed = False
        result.check.trials.extend(t for t in f.details.get("trials", []) if t not in result.check.trials)
        result.check.mismatches = list(f.details.get("mismatches") or [])
    if "bench" in f.details:
        result.bench = f.details["bench"]
    _end(result, f.verdict, f.reason_code, f.reason)
