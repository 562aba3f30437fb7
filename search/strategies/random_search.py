"""Random search: a seeded permutation of the valid points, so sampling is without replacement."""

from __future__ import annotations

import numpy as np

from search.space import Config
from search.strategies.exhaustive import OrderedSearch


class RandomSearch(OrderedSearch):
    name = "random"

    def order(self) -> list[Config]:
        perm = np.random.default_rng(self.seed).permutation(len(self.valid_points))
        return [self.valid_points[i] for i in perm]
