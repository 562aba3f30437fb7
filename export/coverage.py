"""What an export's evidence does not cover, so that it is seen rather than served silently.

- ``untuned``: the batch buckets left to the stock kernel because nothing was ever measured there. The package's
  dispatch runs stock outside its tuned buckets, silently and correctly. A bucket that a job timed and stock won is a
  verdict; one that no job ever timed is a gap in the tuning (every bench plan before session 28 timed M = 1, 2, 4,
  16, 64, so batch 8 and 32 ran stock everywhere). The export names the gaps so that they get tuned.
- ``slower``: the batch sizes of a tuned entry's bucket at which its runs (the bucket checks time every M) measured it
  slower than stock: the package's dispatch runs stock there, and the export says so.
- ``unchecked``: the batch sizes a tuned entry serves that no run checked. Dispatch runs a bucket's winner at every M
  of the bucket (the kernel that won M = 8 at M = 5-7 too); the service checked it at the M its runs measured. The
  package's ``selftest --every-m`` checks the rest on the machine it is installed on.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from export.collect import Collection, Entry, bucket_lo
from export.errors import Problem
from kernels.deployment import DEFAULT_BATCHES, batch_bucket, spans, unchecked_in


def untuned(got: Collection, batch_sizes: Iterable[int] = DEFAULT_BATCHES) -> list[Problem]:
    """Per exported (slot, shape): each bucket of ``batch_sizes`` (token counts M) with no winner, no stock verdict
    and no refused winner."""
    seen: dict[tuple[str, str], set[str]] = defaultdict(set)
    for item in (*got.entries, *got.stock, *got.problems):
        seen[item.slot, item.shape_key].add(item.bucket)
    wanted = sorted({batch_bucket(m) for m in batch_sizes}, key=bucket_lo)
    return [Problem(slot=slot, shape_key=key, bucket=b, reason="never timed: the package runs the stock kernel there")
            for (slot, key), have in sorted(seen.items()) for b in wanted if b not in have]


def unchecked_ms(entry: Entry) -> list[int]:
    """The M of the entry's bucket that none of its runs checked."""
    return unchecked_in(entry.bucket, entry.ms)


def slower(got: Collection) -> list[Problem]:
    """Per exported entry measured slower than stock at some M of its bucket: those M, which the package serves with
    the stock kernel."""
    out = []
    for e in sorted(got.entries, key=lambda e: (e.slot, e.shape_key, bucket_lo(e.bucket))):
        if e.slower_ms:
            worst = min((r for r in e.runs if r.m in e.slower_ms), key=lambda r: r.speedup)
            out.append(Problem(slot=e.slot, shape_key=e.shape_key, bucket=e.bucket,
                               reason=f"measured slower than stock at M={spans(e.slower_ms)} (down to {worst.speedup:.2f}x "
                                      f"at M={worst.m}): the package runs stock there"))
    return out


def unchecked(got: Collection) -> list[Problem]:
    """Per exported entry whose bucket holds M that none of its runs checked: those M."""
    out = []
    for e in sorted(got.entries, key=lambda e: (e.slot, e.shape_key, bucket_lo(e.bucket))):
        missing = unchecked_ms(e)
        if missing:
            out.append(Problem(slot=e.slot, shape_key=e.shape_key, bucket=e.bucket,
                               reason=f"served at M={spans(missing)}, checked at M={spans(e.ms)} only: the package's "
                                      "selftest --every-m checks the rest"))
    return out
