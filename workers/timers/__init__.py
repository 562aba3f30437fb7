"""Device timers: one module per place a kernel can be timed, behind one small interface.

A timer gets, per implementation name ("variant", "stock"), a ``run(i)`` that calls the kernel on
rotating input set ``i``, and ``poison(name, i)`` that refills that implementation's outputs of set
``i`` (so the post-bench re-check sees what the timed calls wrote). It returns per-call samples in
microseconds, one per round and implementation, rounds alternating the order of implementations.
"""

from __future__ import annotations

from typing import Callable, Protocol

import torch

from workers.protocol import BenchSettings

RunFn = Callable[[int], None]
PoisonFn = Callable[[str, int], None]


class StreamEscape(Exception):
    """Work that a CUDA graph could not capture: it escaped the timed stream."""


class Timer(Protocol):
    name: str

    def measure(self, runs: dict[str, RunFn], poison: PoisonFn, n_sets: int, settings: BenchSettings,
                eager: frozenset[str] = frozenset()) -> tuple[dict[str, list[float]], dict[str, set[int]]]:
        """Samples per implementation, and per implementation the set indices its timed calls wrote.
        ``eager`` names trusted implementations that cannot be graph-captured (timed without a graph)."""
        ...


def round_order(names: list[str], r: int) -> list[str]:
    """Alternate which implementation goes first each round (neither always gets the warm machine)."""
    return names if r % 2 == 0 else names[::-1]


def timer_for(device: torch.device, settings: BenchSettings) -> Timer:
    if device.type == "cuda":
        from workers.timers.cuda import CudaGraphTimer
        return CudaGraphTimer(device)
    from workers.timers.cpu import CpuTimer
    return CpuTimer()
