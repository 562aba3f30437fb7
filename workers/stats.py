"""Statistics over timing samples: summaries and the paired-bootstrap speedup interval.

The bench stage captures these functions before the variant is imported and the tamper guard
checks they are unchanged afterwards (workers/tamper.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Summary:
    median: float
    p10: float
    p90: float
    cv: float
    n: int


def summarize(samples: list[float]) -> Summary:
    a = np.asarray(samples, dtype=np.float64)
    if a.size == 0:
        raise ValueError("no samples")
    mean = float(a.mean())
    cv = float(a.std(ddof=1) / mean) if a.size > 1 and mean > 0 else 0.0
    p10, med, p90 = np.percentile(a, [10, 50, 90])
    return Summary(float(med), float(p10), float(p90), cv, int(a.size))


def bootstrap_speedup_ci(variant: list[float], baseline: list[float], *, resamples: int, seed: int,
                         level: float = 0.95) -> tuple[float, float]:
    """CI of median(baseline)/median(variant), resampling *rounds* (pairs): both timings of a round
    shared the machine's state at that moment, so pairing cancels slow drifts."""
    v = np.asarray(variant, dtype=np.float64)
    b = np.asarray(baseline, dtype=np.float64)
    if v.shape != b.shape or v.size == 0:
        raise ValueError("paired bootstrap needs equally many variant and baseline samples")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, v.size, size=(resamples, v.size))
    ratios = np.median(b[idx], axis=1) / np.median(v[idx], axis=1)
    tail = (1.0 - level) / 2 * 100
    lo, hi = np.percentile(ratios, [tail, 100 - tail])
    return float(lo), float(hi)
