"""Overlap of time intervals: how many runs were in flight at once, measured from their own timestamps
(the property a search's concurrency tests assert, instead of a wall-clock bound)."""

from __future__ import annotations

from datetime import datetime


def peak_overlap(intervals: list[tuple[datetime, datetime]]) -> int:
    """The largest number of intervals open at one instant; an end and a start at the same instant do
    not overlap."""
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals], key=lambda e: (e[0], e[1]))
    peak = cur = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return peak
