"""CPU timer: perf_counter_ns around each call, after warm-up, outputs poisoned before every call.

Per-call timing is honest on the CPU: calls are synchronous, so there is no queue to hide work in.
"""

from __future__ import annotations

import time

from workers.protocol import BenchSettings
from workers.timers import PoisonFn, RunFn, round_order

# Bound now, before any variant is imported: a variant patching time.perf_counter_ns later changes
# neither this timer's clock nor goes unnoticed (the tamper guard compares identities).
_clock = time.perf_counter_ns


class CpuTimer:
    name = "cpu_perf_counter"

    def measure(self, runs: dict[str, RunFn], poison: PoisonFn, n_sets: int, settings: BenchSettings,
                eager: frozenset[str] = frozenset()) -> tuple[dict[str, list[float]], dict[str, set[int]]]:
        # every call is eager here: ``eager`` changes nothing on the CPU
        names = list(runs)
        cursor = 0  # one counter over all calls: each call reads a set untouched for a full rotation
        for r in range(settings.warmup):
            for name in round_order(names, r):
                runs[name](cursor % n_sets)
                cursor += 1
        samples: dict[str, list[float]] = {name: [] for name in names}
        written: dict[str, set[int]] = {name: set() for name in names}
        start = _clock()
        r = 0
        while r < settings.max_rounds and (r < settings.min_rounds or _clock() - start < settings.min_time_s * 1e9):
            for name in round_order(names, r):
                i = cursor % n_sets
                cursor += 1
                poison(name, i)
                t0 = _clock()
                runs[name](i)
                t1 = _clock()
                samples[name].append((t1 - t0) / 1e3)
                written[name].add(i)
            r += 1
        return samples, written
