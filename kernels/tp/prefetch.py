"""L2 prefetch of the next GEMM's weights while the o_proj all-reduce runs (CUDA only).

A decode-size all-reduce (M x 7168 bf16: 14 KB to 900 KB) is latency-bound: for several
microseconds the HBM is almost idle. The GEMM that follows (router gate 384x7168 bf16 = 5.5 MB,
shared-expert w13 512x7168 = 7.3 MB at K2 TP8) reads its weights cold from HBM. A small kernel on a
side stream, launched beside the all-reduce, reads those weights once with an ``evict_last``
cache policy (``ld.global.L1::evict_last.L2::cache_hint``; ptxas refuses it together with
``.cg``), so they are L2-resident (H200: 60 MB L2) when the GEMM starts. It writes one word per CTA to a sink (the loads cannot be dead-code
eliminated) and uses few CTAs so it does not take SMs from the collective.

Only the Triton path exists: on a CPU (or without Triton) ``prefetch_unavailable`` says why and
nothing runs. The kernel's PTX can be compiled and inspected with no GPU (``compile_ptx``).
Multicast is never used here (plain loads on one GPU).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import torch

BLOCK = 1024        # int32 words per CTA iteration (4 KB)
DEFAULT_CTAS = 16   # few: the all-reduce beside it needs its SMs


def prefetch_unavailable(device: torch.device) -> str:
    """'' when the prefetch can run on ``device``, else the reason it is skipped."""
    if device.type != "cuda":
        return f"L2 prefetch is CUDA-only (device {device})"
    if not torch.cuda.is_available():
        return "CUDA is not available"
    try:
        import triton  # noqa: F401
    except ImportError:
        return "triton is not installed"
    return ""


@lru_cache(maxsize=1)
def _kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def l2_prefetch_kernel(src_ptr, sink_ptr, n_words, iters, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        ctas = tl.num_programs(0)
        acc = tl.zeros([BLOCK], dtype=tl.int32)
        for it in range(iters):  # grid-strided: CTA pid reads blocks pid, pid + ctas, ...
            offs = (it * ctas + pid) * BLOCK + tl.arange(0, BLOCK)
            acc ^= tl.load(src_ptr + offs, mask=offs < n_words, other=0,
                           eviction_policy="evict_last")
        tl.store(sink_ptr + pid, tl.sum(acc, axis=0))

    return l2_prefetch_kernel


def compile_ptx(arch: int = 90) -> str:
    """The prefetch kernel's PTX for sm_<arch>, compiled with no GPU (evidence for the CPU tests)."""
    from kernels.backends.triton_backend import compile_triton_ptx

    return compile_triton_ptx(_kernel(), {"src_ptr": "*i32", "sink_ptr": "*i32", "n_words": "i32", "iters": "i32"},
                              {"BLOCK": BLOCK}, arch=arch, num_warps=4, num_stages=2)


def _words(t: torch.Tensor) -> torch.Tensor:
    flat = t.detach().reshape(-1)
    if flat.numel() * flat.element_size() % 4:
        raise ValueError("prefetch needs a tensor of a multiple of 4 bytes")
    return flat.view(torch.uint8).view(torch.int32)


class L2Prefetcher:
    """Prefetch ``weights`` into L2 on a side stream: ``issue()`` before the collective,
    ``join()`` before the GEMM that reads them. Both are CUDA-graph capturable."""

    def __init__(self, weights: list[torch.Tensor], ctas: int = DEFAULT_CTAS):
        reason = prefetch_unavailable(weights[0].device) if weights else "nothing to prefetch"
        if reason:
            raise RuntimeError(reason)
        self.device = weights[0].device
        self.words = [_words(w) for w in weights]
        self.ctas = ctas
        self.stream = torch.cuda.Stream(device=self.device)
        self.sink = torch.empty((ctas,), dtype=torch.int32, device=self.device)

    def bytes(self) -> int:
        return sum(w.numel() * 4 for w in self.words)

    def issue(self) -> None:
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        kernel = _kernel()
        with torch.cuda.stream(self.stream):
            for w in self.words:
                n = w.numel()
                iters = -(-n // (BLOCK * self.ctas))
                kernel[(self.ctas,)](w, self.sink, n, iters, BLOCK=BLOCK, num_warps=4)

    def join(self) -> None:
        torch.cuda.current_stream(self.device).wait_stream(self.stream)
