"""Exhaustive search: every valid point once, in the space's enumeration order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from search.space import Config, ConfigSpace
from search.strategies.base import Budget, Proposal, SearchStrategy


class OrderedSearch(SearchStrategy):
    """Proposes a fixed order of points, skipping any already seen (e.g. replayed on resume)."""

    def __init__(self, space: ConfigSpace, shape: Mapping[str, Any], *, budget: Budget | None = None,
                 seed: int = 0, limits: Mapping[str, Any] | None = None) -> None:
        super().__init__(space, shape, budget=budget, seed=seed, limits=limits)
        self._order = self.order()
        self._cursor = 0  # everything before the cursor has been proposed or seen

    def order(self) -> list[Config]:
        return list(self.valid_points)

    def _skip_seen(self) -> None:
        while self._cursor < len(self._order) and self.seen(self._order[self._cursor]):
            self._cursor += 1

    def _propose(self, n: int) -> list[Proposal]:
        out: list[Proposal] = []
        while len(out) < n:
            self._skip_seen()
            if self._cursor >= len(self._order):
                break
            out.append(Proposal(config=self._order[self._cursor]))
            self._cursor += 1
        return out

    def _exhausted(self) -> bool:
        self._skip_seen()
        return self._cursor >= len(self._order)


class ExhaustiveSearch(OrderedSearch):
    name = "exhaustive"
