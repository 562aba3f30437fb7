"""How a stage ends a run early, and the one place the harness calls variant code."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import torch

from kernels.backends.base import line_in_source
from workers.protocol import Verdict


class Failure(Exception):
    """Ends the run with this verdict (raised by the stages, turned into the RunResult by the pipeline)."""

    def __init__(self, verdict: Verdict, reason_code: str, reason: str, **details: Any):
        super().__init__(f"{verdict}/{reason_code}: {reason}")
        self.verdict = verdict
        self.reason_code = reason_code
        self.reason = reason
        self.details = details


# What torch and the CUDA libraries say when an allocation on the device fails (torch.OutOfMemoryError is the usual
# form; cuBLAS and a raw CUDA error reach Python as RuntimeErrors with these words)
_OOM_WORDS = ("CUDA out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "cudaErrorMemoryAllocation", "CUDA error: out of memory")


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from (a Failure wraps the variant's), at most 8: never a cycle's
    worth."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return
        yield seen
        seen = seen.__cause__ or seen.__context__


def device_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc``, or an exception it was raised from, is the device running out of memory."""
    return any(isinstance(e, torch.OutOfMemoryError) or any(w in str(e) for w in _OOM_WORDS)
               for e in exception_chain(exc))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def call_kernel(fn: Callable[..., None], inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor],
                device: torch.device, source_file: str) -> None:
    """Run the variant once and wait for it; an exception it raises is its crash, with its line."""
    try:
        fn(**inputs, **outputs)
        sync(device)
    except Exception as exc:
        line = line_in_source(exc, source_file)
        where = f" (variant line {line})" if line else ""
        raise Failure(Verdict.crashed, "variant_exception", f"{type(exc).__name__}: {exc}{where}", line=line) from exc
