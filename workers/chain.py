"""The chained build's check: a variant whose build takes ``pdl`` can ship as a link of a chain of programmatic
dependent launches (the exported package's dispatch(..., pdl=1)), so that form is checked too, in the race it
exists for.

A chained kernel may start while the kernel ahead of it still runs, and it must read nothing but its weights
until griddepcontrol.wait. Here the kernel ahead is a producer that lets it launch at once, sleeps, and only then
writes the chained kernel's activations (the slot's inputs that are not weights: up to PAIRS of them, in one
launch) into buffers that held poison until then (NaN; 0 for integer ones such as expert ids, which must stay in
range): a kernel that read an activation before its wait computes on poison, and the slot's check fails it.
Weights are in place before the producer (a model's weights are), as a chained kernel may fetch them at once.
sm_90+ GPUs only: elsewhere there is no programmatic dependent launch to check.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import torch

from workers.failures import Failure, call_kernel
from workers.protocol import Trial, Verdict

Tensors = dict[str, torch.Tensor]
# How long the producer holds its writes back after letting the chained kernel launch: far longer than the host
# takes to launch a warmed-up kernel (tens of us) and than a decode GEMM's weight prologue, so the chained kernel
# is running while the activations still hold poison. (Session ZZ, 200 us and no warm-up: the first chained call
# compiled on the host while the producer ran out, and an early read went unseen at o_proj M = 1.)
PRODUCER_SLEEP_NS = 2_000_000


def device_chains(device: torch.device) -> bool:
    """Programmatic dependent launch needs an sm_90+ GPU (the CPU and Triton's interpreter have no grids to chain)."""
    return device.type == "cuda" and torch.cuda.is_available() and torch.cuda.get_device_capability(device)[0] >= 9


def takes_pdl(module: Any) -> bool:
    """Whether the variant's build can make its chained form: build(config, shape, pdl=...)."""
    build = getattr(module, "build", None)
    try:
        return build is not None and "pdl" in inspect.signature(build).parameters
    except (TypeError, ValueError):
        return False


def chainable(module: Any, device: torch.device) -> bool:
    """True when this variant's build takes pdl and this device can launch programmatic dependents."""
    return device_chains(device) and takes_pdl(module)


PAIRS = 4  # activations one producer launch writes; a slot with more has its first ones written before it


@functools.cache
def _head_copy_kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def head_copy(s0, d0, n0, s1, d1, n1, s2, d2, n2, s3, d3, n3, SLEEP_NS: tl.constexpr, BLOCK: tl.constexpr):
        tl.extra.cuda.gdc_launch_dependents()
        # hold the writes back by SLEEP_NS of %globaltimer (nanosleep alone may return at once)
        tl.inline_asm_elementwise(
            "{ .reg .u64 %kt_t0, %kt_t1; .reg .pred %kt_p; mov.u64 %kt_t0, %globaltimer; "
            "KT_HOLD: nanosleep.u32 1000; mov.u64 %kt_t1, %globaltimer; sub.u64 %kt_t1, %kt_t1, %kt_t0; "
            "setp.lt.u64 %kt_p, %kt_t1, $1; @%kt_p bra KT_HOLD; mov.u32 $0, 0; }",
            "=r,l", [tl.full([1], SLEEP_NS, tl.int64)], dtype=tl.int32, is_pure=False, pack=1)
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(d0 + offs, tl.load(s0 + offs, mask=offs < n0), mask=offs < n0)
        tl.store(d1 + offs, tl.load(s1 + offs, mask=offs < n1), mask=offs < n1)
        tl.store(d2 + offs, tl.load(s2 + offs, mask=offs < n2), mask=offs < n2)
        tl.store(d3 + offs, tl.load(s3 + offs, mask=offs < n3), mask=offs < n3)
    return head_copy


def producer_ptx(arch: str = "sm_90a") -> str:
    """The producer's PTX for ``arch`` with no GPU (what the tests read)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {f"{k}{i}": t for i in range(PAIRS) for k, t in (("s", "*u8"), ("d", "*u8"), ("n", "i32"))}
    sig.update({"SLEEP_NS": "constexpr", "BLOCK": "constexpr"})
    src = ASTSource(_head_copy_kernel(), sig, {"SLEEP_NS": PRODUCER_SLEEP_NS, "BLOCK": 4096}, {})
    cc = int("".join(ch for ch in arch if ch.isdigit()))
    return triton.compile(src, target=GPUTarget("cuda", cc, 32)).asm["ptx"]


def produce(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """dst[:] = src[:] for each of up to PAIRS (src, dst) in one launch, as a chain's head:
    griddepcontrol.launch_dependents first, then the hold, then the copies."""
    import triton

    if not 0 < len(pairs) <= PAIRS:
        raise ValueError(f"1 to {PAIRS} activations per producer, not {len(pairs)}")
    flat = [(s.reshape(-1).view(torch.uint8), d.reshape(-1).view(torch.uint8)) for s, d in pairs]
    flat += [flat[0]] * (PAIRS - len(flat))     # unused slots: n = 0, nothing copied
    sizes = [s.numel() for s, _ in flat[:len(pairs)]] + [0] * (PAIRS - len(pairs))
    args = [a for (s, d), n in zip(flat, sizes) for a in (s, d, n)]
    _head_copy_kernel()[(triton.cdiv(max(sizes), 4096),)](*args, SLEEP_NS=PRODUCER_SLEEP_NS, BLOCK=4096)


def activation_names(slot: Any) -> list[str]:
    return [n for n in slot.input_names if n not in slot.weight_names]


def check_chained(slot: Any, shape: Any, m: int, device: torch.device, chained_fn: Callable[..., None],
                  source_file: str, seeds: list[int], verify: Callable[[], None]) -> list[Trial]:
    """One trial per seed; raises Failure (check_failed, chained_mismatch) on the first wrong answer."""
    acts = activation_names(slot)
    if not acts:
        return []
    trials: list[Trial] = []
    # one untimed, unchecked call first: compiling or loading the chained kernel on the host must not happen while
    # the producer holds, or the race is over before the kernel is launched
    warm = slot.make_inputs(shape, m, seeds[0] ^ 0x5EED, device)
    call_kernel(chained_fn, warm, slot.alloc_outputs(shape, m, device), device, source_file)
    verify()
    # One set of inputs alive at a time, and the weights never copied: the routed experts' are GBs, and a card's
    # workers check side by side (twelve on an H100 ran out of its 80 GB when this held three sets and a copy).
    del warm
    raced = acts[-PAIRS:]
    for seed in seeds:
        fresh = slot.make_inputs(shape, m, seed, device)
        # the raced activations start as poison in copies the producer fills; the rest are fresh's own tensors
        inputs = {k: (v.clone() if k in raced else v) for k, v in fresh.items()}
        for k in raced:
            inputs[k].fill_(float("nan") if inputs[k].is_floating_point() else 0)
        outputs = slot.alloc_outputs(shape, m, device)
        slot.poison(outputs)
        torch.cuda.synchronize(device)
        produce([(fresh[k], inputs[k]) for k in raced])   # lets the chained kernel launch, writes these late
        call_kernel(chained_fn, inputs, outputs, device, source_file)
        verify()
        ref = slot.reference(shape, fresh)
        outcome = slot.check(shape, outputs, ref, fresh)
        trials.append(Trial(kind="chained", seed=seed, passed=outcome.passed, rel_l2=outcome.rel_l2,
                            max_abs_err=outcome.max_abs_err))
        if not outcome.passed:
            raise Failure(Verdict.check_failed, "chained_mismatch",
                          f"chained build (pdl=1), seed {seed}: {outcome.reason}; a chained kernel must read its "
                          f"activations ({', '.join(raced)}) only after griddepcontrol.wait", trials=trials,
                          mismatches=outcome.mismatches)
        del fresh, inputs, outputs, ref, outcome
    return trials
