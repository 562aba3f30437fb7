"""CUDA timer: one CUDA graph per implementation of R back-to-back calls over the rotating sets,
replayed interleaved between Events; per-call time = replay time / R.

Graph capture is the stream-escape check: host syncs or unsupported work during capture fail it,
and work launched on a stream that did not join the capture is not in the graph at all, so its
replay is implausibly fast and leaves the poisoned outputs unwritten (both caught by the bench).
Import-safe on CPU-only torch: nothing touches CUDA until ``measure`` runs.
"""

from __future__ import annotations

import torch

from workers.protocol import BenchSettings
from workers.timers import PoisonFn, RunFn, StreamEscape, round_order

MIN_GRAPH_CALLS = 32
# Bound before any variant is imported (see workers/tamper.py for the identity check).
_elapsed_time = torch.cuda.Event.elapsed_time


class CudaGraphTimer:
    name = "cuda_graph"

    def __init__(self, device: torch.device):
        self.device = device

    def measure(self, runs: dict[str, RunFn], poison: PoisonFn, n_sets: int, settings: BenchSettings,
                eager: frozenset[str] = frozenset()) -> tuple[dict[str, list[float]], dict[str, set[int]]]:
        # Enough calls per replay that launch jitter averages out (a replay of a few us kernels is
        # otherwise dominated by it: CV 0.10-0.15 seen on the H200), a whole number of passes over the sets.
        calls = settings.graph_calls or n_sets * -(-MIN_GRAPH_CALLS // n_sets)
        names = list(runs)
        with torch.cuda.device(self.device):
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up (JIT, autotune, lazy init) outside any capture
                for _ in range(max(settings.warmup, 1)):
                    for name in names:
                        for i in range(n_sets):
                            runs[name](i)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            # A trusted baseline that syncs with the host is issued eagerly, one pass over the sets per
            # "replay" (host syncs included: that is how it runs; its calls take milliseconds, so one
            # pass is enough); a failed capture would poison the context for everything after it, so
            # it is never attempted.
            graphs = {name: (_EagerPass(runs[name], n_sets) if name in eager
                             else self._capture(name, runs[name], calls, n_sets)) for name in names}
            per_replay = {name: n_sets if name in eager else calls for name in names}
            for name in names:
                for i in range(n_sets):
                    poison(name, i)
            torch.cuda.synchronize()
            samples: dict[str, list[float]] = {name: [] for name in names}
            start_ev = torch.cuda.Event(enable_timing=True)
            end_ev = torch.cuda.Event(enable_timing=True)
            rounds = max(settings.min_rounds, 1)
            for r in range(rounds):
                for name in round_order(names, r):
                    start_ev.record()
                    graphs[name].replay()
                    end_ev.record()
                    end_ev.synchronize()
                    samples[name].append(_elapsed_time(start_ev, end_ev) * 1e3 / per_replay[name])
        return samples, {name: {j % n_sets for j in range(calls)} for name in names}

    @staticmethod
    def _capture(name: str, run: RunFn, calls: int, n_sets: int) -> torch.cuda.CUDAGraph:
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                for j in range(calls):
                    run(j % n_sets)
            torch.cuda.synchronize()
        except Exception as exc:  # the capture is the check: any failure is work outside the stream
            raise StreamEscape(f"{name}: CUDA graph capture failed: {type(exc).__name__}: {exc}") from exc
        return graph


class _EagerPass:
    """The replay() of a graph that could not be captured: one call per set, issued one by one."""

    def __init__(self, run: RunFn, n_sets: int):
        self.run, self.n_sets = run, n_sets

    def replay(self) -> None:
        for i in range(self.n_sets):
            self.run(i)
