"""The check stage: is the variant's answer right, honestly computed, and computed every time?

Each step calls the variant on poisoned outputs, hashes its inputs around the call, and computes
the reference only *after* the call (a variant cannot pick up the reference's freed memory), then
scrubs it. Steps (DESIGN.md, "Evaluation protocol"):
  fresh inputs per trial (seeds recorded) -> the same buffers with new values (pointer/id caches)
  -> the same buffers with only the last rows changed (partial-content caches) -> one call under
  the profiler (undeclared library GEMMs). ``recheck_timed`` re-checks what the timed calls wrote.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Callable

import torch

from kernels.slots.base import CheckOutcome, Shape, Slot, merge_outcomes
from workers.failures import Failure, call_kernel
from workers.protocol import CheckStage, Trial, Verdict

Tensors = dict[str, torch.Tensor]

# Library GEMMs: a non-torch variant calling them is running cuBLAS/oneDNN, not its own kernel.
LIBRARY_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "aten::baddbmm",
                         "aten::addbmm", "aten::_scaled_mm", "aten::_int_mm", "aten::mv", "aten::addmv",
                         "aten::_grouped_mm", "aten::_scaled_grouped_mm"})
LIBRARY_KERNEL_MARKERS = ("cublas", "nvjet", "xmma_gemm", "gemv2", "gemvx", "gemmk1")
FLOAT_SENTINEL = 32768.0  # exact in bf16/fp16; tells "never written" apart from "wrote NaN"


@dataclass
class CheckContext:
    slot: Slot
    shape: Shape
    m: int
    device: torch.device
    fn: Callable[..., None]
    source_file: str
    verify: Callable[[], None]          # tamper guard, after every variant call
    profile_library: bool               # look for library GEMMs (non-torch languages)


@dataclass
class _History:
    outputs: list[Tensors] = field(default_factory=list)  # CPU copies of every earlier call's outputs

    def repeats(self, outs: Tensors) -> bool:
        now = _cpu(outs)
        return any(all(torch.equal(now[k], old[k]) for k in now) for old in self.outputs)

    def add(self, outs: Tensors) -> None:
        self.outputs.append(_cpu(outs))


def _cpu(ts: Tensors) -> Tensors:
    return {k: t.detach().to("cpu", copy=True) for k, t in ts.items()}


# Inputs at least this large are digested where they live (see _linear_digest) instead of being
# copied to the host and hashed there: a 4.2 GB MoE weight set took seconds per hash, hashed ~14
# times per run (session H on the H200: every moe_experts run past its 90 s limit).
DEVICE_DIGEST_MIN_BYTES = 16 << 20
_DIGEST_WORDS = 1 << 24  # int32 words per chunk: two int64 temporaries of 128 MiB each


def hash_tensors(ts: Tensors) -> str:
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(ts):
        t = ts[name].detach()
        h.update(f"{name}{tuple(t.shape)}{t.stride()}{t.dtype}".encode())
        nbytes = t.numel() * t.element_size()
        if nbytes >= DEVICE_DIGEST_MIN_BYTES and nbytes % 4 == 0:
            h.update(_linear_digest(t))
        else:
            h.update(t.to("cpu").contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _coefficient_source() -> Callable[[torch.device], torch.Tensor]:
    """Two rows of odd random int64, the same for every digest of this process, from a seed drawn from
    the OS. Regenerated on each call from the seed held in this closure, not kept as a tensor or as
    module data: a variant could zero a cached tensor in place, and workers.tamper fingerprints the
    module's data, which a lazily filled cache would trip."""
    seed = int.from_bytes(os.urandom(8), "little") >> 1

    def coefficients(device: torch.device) -> torch.Tensor:
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        return torch.randint(-(2**62), 2**62, (2, _DIGEST_WORDS), generator=gen, device=device,
                             dtype=torch.int64) | 1
    return coefficients


_coefficients = _coefficient_source()


def _linear_digest(t: torch.Tensor) -> bytes:
    """sum_i c_i * w_i mod 2**64 over the tensor's 32-bit words w_i, twice with independent random odd
    c_i, chunk sums weighted by their position: any change of one word changes both sums (c_i is odd,
    so c_i * delta is never 0 mod 2**64), several changes cancel with probability ~2**-128. Runs on the
    tensor's device; only 16 bytes come back."""
    words = t.contiguous().reshape(-1).view(torch.uint8).view(torch.int32)
    coeffs = _coefficients(t.device)
    total = torch.zeros(2, dtype=torch.int64, device=t.device)
    for chunk, start in enumerate(range(0, words.numel(), _DIGEST_WORDS)):
        w = words[start:start + _DIGEST_WORDS].to(torch.int64)
        part = (coeffs[:, :w.numel()] * w).sum(dim=1)  # int64 arithmetic wraps mod 2**64
        total += part * _odd_constant(chunk)
    return b"".join(int(v).to_bytes(8, "little", signed=True) for v in total.tolist())


def _odd_constant(i: int) -> int:
    """An odd int64 per chunk position (golden-ratio multiplicative hash), so swapping chunks shows."""
    v = ((i + 1) * 0x9E3779B97F4A7C15) & (2**64 - 1) | 1
    return v - 2**64 if v >= 2**63 else v


def scrub(ts: Tensors) -> None:
    """Overwrite a reference before it goes back to the caching allocator."""
    for t in ts.values():
        t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-1)


def _fill_sentinel(outs: Tensors) -> None:
    for t in outs.values():
        t.fill_(FLOAT_SENTINEL) if t.is_floating_point() else t.fill_(torch.iinfo(t.dtype).min + 7)


def _has_nonfinite(outs: Tensors) -> bool:
    return any(t.is_floating_point() and not bool(torch.isfinite(t).all()) for t in outs.values())


def run_check(ctx: CheckContext, seeds: list[int]) -> tuple[CheckStage, bool]:
    """All check steps; returns the stage record and whether library GEMMs were seen.
    Raises Failure on the first failed step."""
    trials: list[Trial] = []
    history = _History()
    inputs: Tensors = {}
    outputs: Tensors = {}
    for k, seed in enumerate(seeds[:-2]):
        inputs = outputs = {}  # the last trial's go first: moe_experts' inputs are 4 GB a set
        inputs = ctx.slot.make_inputs(ctx.shape, ctx.m, seed, ctx.device)
        outputs = ctx.slot.alloc_outputs(ctx.shape, ctx.m, ctx.device)
        _step(ctx, "fresh" if k == 0 else "fresh_again", seed, inputs, outputs, history, trials)

    # Same tensors (same id(), same data_ptr) with entirely new values.
    seed = seeds[-2]
    fresh = ctx.slot.make_inputs(ctx.shape, ctx.m, seed, ctx.device)
    for name, t in inputs.items():
        t.copy_(fresh[name])
    del fresh  # at most two sets of inputs at once
    _step(ctx, "same_buffers_new_values", seed, inputs, outputs, history, trials)

    # Same tensors, only the last row of each float input changed: caches keyed on a cheap
    # fingerprint of the content (first elements, a strided sample) return the stale answer.
    seed = seeds[-1]
    fresh = ctx.slot.make_inputs(ctx.shape, ctx.m, seed, ctx.device)
    for name, t in inputs.items():
        if t.is_floating_point():
            t[-1].copy_(fresh[name][-1])
    _step(ctx, "same_buffers_partial", seed, inputs, outputs, history, trials)

    library_ops = library_calls(ctx, inputs, outputs) if ctx.profile_library else []
    stage = CheckStage(passed=True, trials=trials, library_ops=library_ops)
    return stage, bool(library_ops)


def _step(ctx: CheckContext, kind: str, seed: int, inputs: Tensors, outputs: Tensors, history: _History,
          trials: list[Trial]) -> None:
    ctx.slot.poison(outputs)
    before = hash_tensors(inputs)
    call_kernel(ctx.fn, inputs, outputs, ctx.device, ctx.source_file)
    ctx.verify()
    if hash_tensors(inputs) != before:
        raise Failure(Verdict.rejected, "wrote_inputs", f"{kind} trial (seed {seed}): the variant changed its inputs")
    ref = ctx.slot.reference(ctx.shape, inputs)  # only now: nothing of it existed during the call
    outcome = ctx.slot.check(ctx.shape, outputs, ref, inputs)
    trials.append(Trial(kind=kind, seed=seed, passed=outcome.passed, rel_l2=outcome.rel_l2,
                        max_abs_err=outcome.max_abs_err))
    if not outcome.passed and history.repeats(outputs):
        scrub(ref)
        raise Failure(Verdict.rejected, "cached_output",
                      f"{kind} trial (seed {seed}): wrong, and bit-identical to an earlier call's outputs on other "
                      f"input values (an answer cached by address, id() or content)", trials=trials)
    if not outcome.passed:
        code = _classify(ctx, inputs, outputs, ref, outcome) if _has_nonfinite(outputs) else "mismatch"
        scrub(ref)
        raise Failure(Verdict.check_failed, code, f"{kind} trial (seed {seed}): {outcome.reason}",
                      trials=trials, mismatches=outcome.mismatches)
    scrub(ref)
    history.add(outputs)


def _classify(ctx: CheckContext, inputs: Tensors, outputs: Tensors, ref: Tensors, outcome: CheckOutcome) -> str:
    """NaN in the outputs: never written (the poison survived) or written as NaN? One more call on
    a finite sentinel tells which."""
    _fill_sentinel(outputs)
    call_kernel(ctx.fn, inputs, outputs, ctx.device, ctx.source_file)
    ctx.verify()
    for name, t in outputs.items():
        sentinel = FLOAT_SENTINEL if t.is_floating_point() else torch.iinfo(t.dtype).min + 7
        left = (t == sentinel) & (ref[name].to(t.device) != sentinel) if name in ref else (t == sentinel)
        if bool(left.any()):
            return "unwritten_output"
    return "nan_output"


def library_calls(ctx: CheckContext, inputs: Tensors, outputs: Tensors) -> list[str]:
    """One call under torch.profiler: the library GEMM ops and kernels it ran."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.device.type == "cuda" else [])
    ctx.slot.poison(outputs)
    with profile(activities=activities) as prof:
        call_kernel(ctx.fn, inputs, outputs, ctx.device, ctx.source_file)
    ctx.verify()
    names = {e.name for e in prof.events()}
    return sorted(n for n in names
                  if n in LIBRARY_OPS or any(mk in n.lower() for mk in LIBRARY_KERNEL_MARKERS))


def recheck_timed(slot: Slot, shape: Shape, sets: list[Tensors], outputs: list[Tensors], written: set[int],
                  hashes_before: list[str], bench_seed: int) -> Trial:
    """After the bench: every set the timed calls wrote must hold the right answer, and no input
    set may have changed. Catches variants that behave differently once timed (warm-up detection,
    lazy or batched answers). Returns one trial summarising all re-checked sets (worst errors)."""
    for i, inputs in enumerate(sets):
        if hash_tensors(inputs) != hashes_before[i]:
            raise Failure(Verdict.rejected, "wrote_inputs", f"input set {i} changed during the bench")
    outcomes = []
    for i in sorted(written):
        ref = slot.reference(shape, sets[i])
        outcome = slot.check(shape, outputs[i], ref, sets[i])
        scrub(ref)
        outcomes.append(outcome)
        if not outcome.passed:
            trial = Trial(kind="timed", seed=bench_seed + i, passed=False, rel_l2=outcome.rel_l2,
                          max_abs_err=outcome.max_abs_err)
            raise Failure(Verdict.rejected, "timed_output_mismatch",
                          f"outputs of the timed calls on input set {i} (seed {bench_seed + i}) are wrong although "
                          f"the check passed: {outcome.reason}", trials=[trial], mismatches=outcome.mismatches)
    merged = merge_outcomes(outcomes)
    return Trial(kind=f"timed[{len(outcomes)} sets]", seed=bench_seed, passed=True, rel_l2=merged.rel_l2,
                 max_abs_err=merged.max_abs_err)

