"""The batch buckets an export leaves to the stock kernel because nothing was ever measured there.

The package's dispatch runs stock outside its tuned buckets, silently and correctly. A bucket that a job timed and
stock won is a verdict; one that no job ever timed is a gap in the tuning (every bench plan before session 28 timed
M = 1, 2, 4, 16, 64, so batch 8 and 32 ran stock everywhere). The export names the gaps so that they get tuned.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from export.collect import Collection, bucket_lo
from export.errors import Problem
from kernels.deployment import DEFAULT_BATCHES, batch_bucket


def untuned(got: Collection, batch_sizes: Iterable[int] = DEFAULT_BATCHES) -> list[Problem]:
    """Per exported (slot, shape): each bucket of ``batch_sizes`` (token counts M) with no winner, no stock verdict
    and no refused winner."""
    seen: dict[tuple[str, str], set[str]] = defaultdict(set)
    for item in (*got.entries, *got.stock, *got.problems):
        seen[item.slot, item.shape_key].add(item.bucket)
    wanted = sorted({batch_bucket(m) for m in batch_sizes}, key=bucket_lo)
    return [Problem(slot=slot, shape_key=key, bucket=b, reason="never timed: the package runs the stock kernel there")
            for (slot, key), have in sorted(seen.items()) for b in wanted if b not in have]
