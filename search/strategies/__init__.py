"""Search strategies by name: one module per strategy, all behind search.strategies.base.SearchStrategy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from search.space import ConfigSpace
from search.strategies.base import Budget, Outcome, Proposal, SearchStrategy, Strategy
from search.strategies.exhaustive import ExhaustiveSearch
from search.strategies.random_search import RandomSearch
from search.strategies.successive_halving import SuccessiveHalving
from search.strategies.tpe import TPESearch
from search.strategies.transfer import TransferSearch, TransferSeed, nearest_seeds, shape_distance

STRATEGIES: dict[str, type[SearchStrategy]] = {
    cls.name: cls for cls in (ExhaustiveSearch, RandomSearch, TPESearch, SuccessiveHalving, TransferSearch)
}


def make_strategy(name: str, space: ConfigSpace, shape: Mapping[str, Any], *, budget: Budget | None = None,
                  seed: int = 0, limits: Mapping[str, Any] | None = None, **options: Any) -> SearchStrategy:
    """Build a strategy by its registered name; ``options`` go to its constructor (eta, rung_size,
    n_startup_trials, seeds for transfer, ...)."""
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; known: {sorted(STRATEGIES)}") from None
    return cls(space, shape, budget=budget, seed=seed, limits=limits, **options)


__all__ = ["STRATEGIES", "Budget", "ExhaustiveSearch", "Outcome", "Proposal", "RandomSearch", "SearchStrategy",
           "Strategy", "SuccessiveHalving", "TPESearch", "TransferSearch", "TransferSeed", "make_strategy",
           "nearest_seeds", "shape_distance"]
