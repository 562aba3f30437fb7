"""A deployment: model spec + tensor-parallel degree + dtype + batch sizes + speculative drafts."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from kernels.specs import ModelSpec, builtin_spec

MAX_BATCH = 1024
DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64)
BATCH_BUCKETS = ((1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, 32), (33, 64), (65, 128), (129, 256),
                 (257, 512), (513, 1024))


def batch_bucket(m: int) -> str:
    """The bucket name a token count M falls in, e.g. M=12 -> '9-16'."""
    for lo, hi in BATCH_BUCKETS:
        if lo <= m <= hi:
            return str(lo) if lo == hi else f"{lo}-{hi}"
    raise ValueError(f"M={m} outside 1..{MAX_BATCH}")


def bucket_ms(bucket: str) -> list[int]:
    """Every M a bucket name ("5-8", "2") covers."""
    lo, _, hi = bucket.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def unchecked_in(bucket: str, checked: Iterable[int]) -> list[int]:
    """The M of the bucket not in ``checked``: where a bucket's kernel serves batch sizes no run checked."""
    return sorted(set(bucket_ms(bucket)) - set(checked))


def slower_than_stock(ci_hi: Iterable[tuple[int, float | None]]) -> list[int]:
    """The M at which a kernel was measured slower than stock, from (M, upper speedup CI) of its runs: the highest CI
    of its runs at that M lies wholly below 1 (an untimed run, None, decides nothing). A bucket's kernel serves stock at
    those M (an exported package's dispatch); the bucket checks' runs time every M of a bucket
    (service/bucket_checks.py), so a kernel tuned at M = 32 can be found slower at M = 17."""
    best: dict[int, float] = {}
    for m, hi in ci_hi:
        if hi is not None:
            best[m] = max(best.get(m, hi), hi)
    return sorted(m for m, hi in best.items() if hi < 1.0)


def spans(ms: Iterable[int]) -> str:
    """[3, 5, 6, 7] -> "3,5-7"."""
    out: list[list[int]] = []
    for m in sorted(set(ms)):
        if out and m == out[-1][1] + 1:
            out[-1][1] = m
        else:
            out.append([m, m])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in out)


class Deployment(BaseModel):
    """What a job is evaluated for. ``spec`` is a built-in name or an uploaded HF config.json."""

    spec: str | dict[str, Any] = "kimi-k2-like"
    tp: int = Field(default=8, ge=1, le=64)
    dtype: Literal["bfloat16", "float16"] = "bfloat16"
    batch_sizes: list[int] = Field(default_factory=lambda: list(DEFAULT_BATCHES), min_length=1, max_length=16)
    draft_tokens: int = Field(default=0, ge=0, le=15)

    @field_validator("batch_sizes")
    @classmethod
    def _batches_in_range(cls, v: list[int]) -> list[int]:
        bad = [b for b in v if not 1 <= b <= MAX_BATCH]
        if bad:
            raise ValueError(f"batch sizes must lie in 1..{MAX_BATCH}; got {bad}")
        return sorted(set(v))

    @model_validator(mode="after")
    def _valid(self) -> "Deployment":
        self.model_spec().check_routing()  # SpecError is a ValueError: pydantic reports it clearly
        for b in self.batch_sizes:
            if b * (1 + self.draft_tokens) > MAX_BATCH:
                raise ValueError(f"batch {b} with {self.draft_tokens} drafts gives M > {MAX_BATCH}")
        return self

    def model_spec(self) -> ModelSpec:
        if isinstance(self.spec, str):
            return builtin_spec(self.spec)
        return ModelSpec.from_hf_config(self.spec)

    @property
    def model_name(self) -> str:
        return self.model_spec().name

    def token_counts(self) -> list[int]:
        """M per decode step: with d drafts a step verifies batch x (1 + d) tokens."""
        return sorted({b * (1 + self.draft_tokens) for b in self.batch_sizes})
