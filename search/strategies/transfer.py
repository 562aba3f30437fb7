"""Transfer search: start from what won at the nearest batch size or shape, then continue with TPE.

The known-good configs are evaluated first, nearest first; a seed that is not valid for this shape
(e.g. BLOCK_N larger than the new N) is skipped and listed in ``skipped_seeds``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from search.space import Config, ConfigSpace
from search.strategies.base import Budget
from search.strategies.tpe import TPESearch


class TransferSeed(BaseModel):
    model_config = ConfigDict(frozen=True)

    config: Config
    distance: float = Field(ge=0.0)
    source: str = ""  # where it won, e.g. "M=8" or "q_b_proj[K=1536,N=3072]"


def shape_distance(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """Sum of |log2 ratio| over the numeric dims both shapes have (M included): batch 8 is as far from
    16 as from 4. Shapes with different dims are infinitely far apart."""
    numeric_a = {k: v for k, v in a.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    numeric_b = {k: v for k, v in b.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if set(numeric_a) != set(numeric_b):
        return math.inf
    return sum(abs(math.log2(numeric_a[k] / numeric_b[k])) for k in numeric_a if numeric_a[k] > 0 and numeric_b[k] > 0)


def nearest_seeds(known: Sequence[tuple[Mapping[str, Any], Config]], target: Mapping[str, Any],
                  k: int = 5) -> list[TransferSeed]:
    """The ``k`` known winners (shape incl. M, config) nearest to ``target``, nearest first."""
    seeds = [TransferSeed(config=dict(cfg), distance=d, source=ConfigSpace.canonical(shape))
             for shape, cfg in known if math.isfinite(d := shape_distance(shape, target))]
    return sorted(seeds, key=lambda s: s.distance)[:k]


class TransferSearch(TPESearch):
    name = "transfer"

    def __init__(self, space: ConfigSpace, shape: Mapping[str, Any], *, seeds: Sequence[TransferSeed] = (),
                 budget: Budget | None = None, seed: int = 0, limits: Mapping[str, Any] | None = None,
                 **tpe_options: Any) -> None:
        ordered = sorted(seeds, key=lambda s: s.distance)  # stable: equal distances keep their order
        unique: list[TransferSeed] = []
        keys: set[str] = set()
        for s in ordered:
            if (key := ConfigSpace.canonical(s.config)) not in keys:
                keys.add(key)
                unique.append(s)
        super().__init__(space, shape, budget=budget, seed=seed, limits=limits,
                         first=[s.config for s in unique], **tpe_options)
        self.seeds = [s for s in unique if self.is_valid(s.config)]
        self.skipped_seeds = [s for s in unique if not self.is_valid(s.config)]
