"""Successive halving over two fidelities.

A bracket times ``rung_size`` unseen configs (seeded random order) at ``short`` fidelity, keeps the best
1/eta of those that passed, and evaluates only those at ``full`` fidelity. When a bracket is complete the
next one starts on fresh configs, so the budget, not the bracket, decides when the search ends. Short
timings only rank configs inside their bracket: best() reads full-fidelity results alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from search.space import Config, ConfigSpace
from search.strategies.base import Budget, Proposal, SearchStrategy


class SuccessiveHalving(SearchStrategy):
    name = "successive_halving"

    def __init__(self, space: ConfigSpace, shape: Mapping[str, Any], *, budget: Budget | None = None,
                 seed: int = 0, limits: Mapping[str, Any] | None = None, eta: int = 3,
                 rung_size: int | None = None) -> None:
        super().__init__(space, shape, budget=budget, seed=seed, limits=limits)
        if eta < 2:
            raise ValueError(f"eta must be >= 2, got {eta}")
        self.eta = eta
        # Default: a tenth of the space per bracket, at least eta**2 so a bracket promotes >= eta configs.
        self.rung_size = rung_size or min(len(self.valid_points), max(eta * eta, math.ceil(len(self.valid_points) / 10)))
        perm = np.random.default_rng(seed).permutation(len(self.valid_points))
        self._order = [self.valid_points[i] for i in perm]
        self._cursor = 0
        self._rung: list[Config] | None = None      # this bracket's short-fidelity configs
        self._promoted: list[Config] | None = None  # this bracket's full-fidelity configs, once ranked
        self._done = False
        self.brackets: list[dict[str, list[Config]]] = []  # history: {"short": [...], "promoted": [...]}

    def _short_key(self, config: Config) -> str:
        return Proposal(config=config, fidelity="short").key

    def _full_key(self, config: Config) -> str:
        return Proposal(config=config, fidelity="full").key

    def _advance(self) -> None:
        """Move the bracket state machine as far as the results allow."""
        while not self._done:
            if self._rung is None:
                rung: list[Config] = []
                while len(rung) < self.rung_size and self._cursor < len(self._order):
                    c = self._order[self._cursor]
                    self._cursor += 1
                    if not self.seen(c, "short") and not self.seen(c, "full"):
                        rung.append(c)
                if not rung:
                    self._done = True
                    return
                self._rung = rung
            if self._promoted is None:
                if any(self._short_key(c) not in self.results for c in self._rung):
                    return  # shorts still to propose or in flight
                self._promoted = self._rank(self._rung)
                self.brackets.append({"short": list(self._rung), "promoted": list(self._promoted)})
            if any(self._full_key(c) not in self.results for c in self._promoted):
                return
            self._rung = self._promoted = None

    def _rank(self, rung: list[Config]) -> list[Config]:
        passed = [(self.results[self._short_key(c)].value_us, i, c) for i, c in enumerate(rung)
                  if self.results[self._short_key(c)].ok]
        passed.sort(key=lambda t: (t[0], t[1]))
        keep = max(1, math.ceil(len(rung) / self.eta))
        return [c for _, _, c in passed[:keep]]

    def _propose(self, n: int) -> list[Proposal]:
        self._advance()
        if self._done or self._rung is None:
            return []
        if self._promoted is None:
            todo, fidelity = self._rung, "short"
        else:
            todo, fidelity = self._promoted, "full"
        out = [Proposal(config=c, fidelity=fidelity) for c in todo if not self.seen(c, fidelity)]
        return out[:n]

    def _exhausted(self) -> bool:
        self._advance()
        return self._done
