"""How a stage ends a run early, and the one place the harness calls variant code."""

from __future__ import annotations

from typing import Any, Callable

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
