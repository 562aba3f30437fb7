"""The one interface every search strategy implements: ask for proposals, tell outcomes.

A strategy never sees a GPU, a queue or a database: the driver (search/driver.py) or the service asks
it for proposals, has them evaluated wherever, and tells it the outcomes in whatever order they land.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from search.space import Config, ConfigSpace, SpaceError

Fidelity = Literal["full", "short"]
OK = "ok"


class Proposal(BaseModel):
    """A config to evaluate and how thoroughly: ``short`` is a cheap first timing (few replays),
    ``full`` the evaluation protocol's complete bench."""

    model_config = ConfigDict(frozen=True)

    config: Config
    fidelity: Fidelity = "full"

    @property
    def key(self) -> str:
        return f"{self.fidelity}:{ConfigSpace.canonical(self.config)}"


class Outcome(BaseModel):
    """What an evaluation answered. ``value_us`` is the objective (lower is better) and is set exactly
    when the verdict is ``ok``; any other verdict (compile_error, check_failed, crash, timeout, ...) is
    a failure and can never be a winner. ``cost_s`` is the device time the evaluation took."""

    model_config = ConfigDict(frozen=True)

    verdict: str = OK
    value_us: float | None = None
    cost_s: float = Field(default=0.0, ge=0.0)
    detail: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _value_iff_ok(self) -> "Outcome":
        if self.verdict == OK:
            if self.value_us is None or not math.isfinite(self.value_us) or self.value_us <= 0:
                raise ValueError(f"an ok outcome needs a positive finite value_us, got {self.value_us!r}")
        elif self.value_us is not None:
            raise ValueError(f"a failed outcome ({self.verdict}) carries no value_us")
        return self

    @property
    def ok(self) -> bool:
        return self.verdict == OK

    @classmethod
    def success(cls, value_us: float, cost_s: float = 0.0, **detail: Any) -> "Outcome":
        return cls(verdict=OK, value_us=value_us, cost_s=cost_s, detail=detail)

    @classmethod
    def failure(cls, verdict: str, cost_s: float = 0.0, **detail: Any) -> "Outcome":
        if verdict == OK:
            raise ValueError("a failure needs a verdict other than 'ok'")
        return cls(verdict=verdict, cost_s=cost_s, detail=detail)


class Budget(BaseModel):
    """When a search stops: any limit reached ends it. ``patience``: stop after this many full-fidelity
    evaluations in a row without improving the best."""

    model_config = ConfigDict(frozen=True)

    max_evals: int | None = Field(default=None, ge=1)
    max_cost_s: float | None = Field(default=None, gt=0)
    patience: int | None = Field(default=None, ge=1)


class BudgetTracker:
    """Counts what has been spent against a Budget."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.evals = 0
        self.cost_s = 0.0
        self.since_improvement = 0

    def record(self, outcome: Outcome, *, full: bool, improved: bool) -> None:
        self.evals += 1
        self.cost_s += outcome.cost_s
        if improved:
            self.since_improvement = 0
        elif full:
            self.since_improvement += 1

    def exhausted(self) -> bool:
        b = self.budget
        return ((b.max_evals is not None and self.evals >= b.max_evals)
                or (b.max_cost_s is not None and self.cost_s >= b.max_cost_s)
                or (b.patience is not None and self.since_improvement >= b.patience))

    def evals_left(self, in_flight: int) -> int | None:
        if self.budget.max_evals is None:
            return None
        return max(self.budget.max_evals - self.evals - in_flight, 0)

    def stop_reason(self) -> str | None:
        b = self.budget
        if b.max_evals is not None and self.evals >= b.max_evals:
            return f"max_evals={b.max_evals} reached"
        if b.max_cost_s is not None and self.cost_s >= b.max_cost_s:
            return f"max_cost_s={b.max_cost_s} spent ({self.cost_s:.1f} s)"
        if b.patience is not None and self.since_improvement >= b.patience:
            return f"no improvement in {b.patience} evaluations"
        return None


@runtime_checkable
class Strategy(Protocol):
    name: str

    def ask(self, n: int) -> list[Proposal]: ...
    def tell(self, proposal: Proposal, outcome: Outcome) -> None: ...
    def finished(self) -> bool: ...
    def best(self) -> tuple[Config, float] | None: ...


class SearchStrategy(ABC):
    """Bookkeeping shared by every strategy: the valid points, what is pending and evaluated, the best
    full-fidelity result, the budget. Subclasses say only which points to propose next.

    ``ask(n)`` may return fewer than ``n`` proposals (none at all while a strategy waits for results,
    e.g. successive halving between rungs). Proposals are always valid points, never repeated."""

    name: str = "base"

    def __init__(self, space: ConfigSpace, shape: Mapping[str, Any], *, budget: Budget | None = None,
                 seed: int = 0, limits: Mapping[str, Any] | None = None) -> None:
        self.space = space
        self.shape = dict(shape)
        self.limits = dict(limits or {})
        self.seed = seed
        self.tracker = BudgetTracker(budget or Budget())
        self.valid_points: list[Config] = list(space.points(self.shape, self.limits))
        if not self.valid_points:
            raise SpaceError(f"no valid config for shape {self.shape} and limits {self.limits}: "
                             f"{space.describe()}")
        self._valid_keys = {ConfigSpace.canonical(c) for c in self.valid_points}
        self.pending: dict[str, Proposal] = {}
        self.results: dict[str, Outcome] = {}
        self._best: tuple[Config, float] | None = None

    # -- the interface ---------------------------------------------------------------------------
    def ask(self, n: int) -> list[Proposal]:
        if n <= 0 or self.finished():
            return []
        left = self.tracker.evals_left(len(self.pending))
        if left is not None:
            n = min(n, left)
        proposals = self._propose(n) if n else []
        for p in proposals:
            if not self.is_valid(p.config):
                raise AssertionError(f"{self.name} proposed an invalid config {p.config}")  # a bug, never data
            if p.key in self.pending or p.key in self.results:
                raise AssertionError(f"{self.name} proposed {p.key} twice")
            self.pending[p.key] = p
        return proposals

    def tell(self, proposal: Proposal, outcome: Outcome) -> None:
        if proposal.key in self.results:
            raise ValueError(f"{proposal.key} was already told")
        if proposal.key not in self.pending:
            raise ValueError(f"{proposal.key} was never asked (use replay() when resuming)")
        del self.pending[proposal.key]
        self._record(proposal, outcome)
        self._on_tell(proposal, outcome)

    def finished(self) -> bool:
        return self.tracker.exhausted() or (not self.pending and self._exhausted())

    def best(self) -> tuple[Config, float] | None:
        """The fastest full-fidelity ok result so far; failures and short timings never count."""
        return self._best

    # -- resuming --------------------------------------------------------------------------------
    def replay(self, proposal: Proposal, outcome: Outcome) -> None:
        """Feed a result known from an earlier life of this search (nothing is re-run)."""
        if not self.is_valid(proposal.config):
            raise SpaceError(f"replayed config {proposal.config} is not valid for this space and shape")
        if proposal.key in self.results:
            return
        self.pending.pop(proposal.key, None)
        self._record(proposal, outcome)
        self._on_replay(proposal, outcome)

    def mark_pending(self, proposal: Proposal) -> None:
        """Declare a proposal already in flight from an earlier life: never proposed again, told later."""
        if not self.is_valid(proposal.config):
            raise SpaceError(f"in-flight config {proposal.config} is not valid for this space and shape")
        if proposal.key not in self.results and proposal.key not in self.pending:
            self.pending[proposal.key] = proposal
            self._on_mark_pending(proposal)

    # -- helpers for subclasses ------------------------------------------------------------------
    def is_valid(self, config: Mapping[str, Any]) -> bool:
        # The valid keys come from the space's own enumeration, so membership is the full check.
        return ConfigSpace.canonical(config) in self._valid_keys

    def seen(self, config: Mapping[str, Any], fidelity: Fidelity = "full") -> bool:
        key = Proposal(config=dict(config), fidelity=fidelity).key
        return key in self.pending or key in self.results

    def _record(self, proposal: Proposal, outcome: Outcome) -> None:
        full = proposal.fidelity == "full"
        improved = False
        if full and outcome.ok:
            assert outcome.value_us is not None
            if self._best is None or outcome.value_us < self._best[1]:
                self._best = (dict(proposal.config), outcome.value_us)
                improved = True
        self.results[proposal.key] = outcome
        self.tracker.record(outcome, full=full, improved=improved)

    @abstractmethod
    def _propose(self, n: int) -> list[Proposal]:
        """Up to ``n`` new valid proposals, none pending or evaluated."""

    @abstractmethod
    def _exhausted(self) -> bool:
        """Nothing left to propose (independent of the budget)."""

    def _on_tell(self, proposal: Proposal, outcome: Outcome) -> None:
        """Learn from a result (model-based strategies)."""

    def _on_replay(self, proposal: Proposal, outcome: Outcome) -> None:
        self._on_tell(proposal, outcome)

    def _on_mark_pending(self, proposal: Proposal) -> None:
        """Model-based strategies register the in-flight point with their model."""


def unseen(points: Iterable[Config], strategy: SearchStrategy, fidelity: Fidelity = "full") -> list[Config]:
    return [c for c in points if not strategy.seen(c, fidelity)]
