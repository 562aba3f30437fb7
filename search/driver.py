"""The search loop, independent of Celery and the database.

The driver keeps ``batch_size`` proposals in flight on an Evaluator, tells the strategy each outcome as
it lands, and stops on the budget (or when the strategy has nothing left). The service wires a Celery
evaluator (submit = enqueue runs, results = poll their states); tests and the benchmark use
ReplayEvaluator over a recorded Landscape, optionally behind ThreadPoolEvaluator for real concurrency.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel, Field

from search.landscape import Landscape
from search.space import Config
from search.strategies.base import Budget, BudgetTracker, Outcome, Proposal, SearchStrategy

Handle = Hashable


class Evaluator(Protocol):
    def submit(self, proposals: Sequence[Proposal]) -> list[Handle]:
        """Start evaluating each proposal; one handle per proposal, in order."""

    def results(self, handles: Sequence[Handle], timeout: float) -> list[Outcome | None]:
        """Outcomes for the handles, None for those not done. May wait up to ``timeout`` seconds for at
        least one to finish; must not wait longer."""


class BestPoint(BaseModel):
    evaluations: int
    cost_s: float
    value_us: float | None
    config: Config | None


class SearchProgress(BaseModel):
    strategy: str
    evaluations: int
    cost_s: float
    in_flight: int
    best_config: Config | None
    best_value_us: float | None
    finished: bool
    stop_reason: str | None
    history: list[BestPoint] = Field(default_factory=list)  # best-so-far after every told outcome


class SearchDriver:
    def __init__(self, strategy: SearchStrategy, evaluator: Evaluator, *, batch_size: int = 8,
                 budget: Budget | None = None, poll_s: float = 0.05,
                 on_result: Callable[[Proposal, Outcome], None] | None = None) -> None:
        """``budget``: an extra limit on top of the strategy's own (e.g. the job's GPU-seconds), counted
        over the outcomes this driver tells. ``on_result``: called after each tell, e.g. to persist
        the run so a restarted service can resume."""
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.strategy = strategy
        self.evaluator = evaluator
        self.batch_size = batch_size
        self.tracker = BudgetTracker(budget or Budget())
        self.poll_s = poll_s
        self.on_result = on_result
        self.in_flight: dict[Handle, Proposal] = {}
        self.history: list[BestPoint] = []
        # (evaluations told, proposals in flight) after each fill: shows that rounds stay full.
        self.fills: list[tuple[int, int]] = []
        self.stop_reason: str | None = None
        self._evals = 0
        self._cost_s = 0.0

    @classmethod
    def resume(cls, strategy: SearchStrategy, evaluator: Evaluator, *, batch_size: int = 8,
               budget: Budget | None = None, finished: Sequence[tuple[Proposal, Outcome]] = (),
               in_flight: Sequence[tuple[Proposal, Handle | None]] = (), **options: Any) -> "SearchDriver":
        """A driver for a search that was interrupted: ``finished`` results are replayed into the fresh
        strategy (never re-run); each ``in_flight`` proposal is re-awaited on its handle, or re-submitted
        when the handle is None (its run was lost)."""
        driver = cls(strategy, evaluator, batch_size=batch_size, budget=budget, **options)
        for proposal, outcome in finished:
            before = strategy.best()
            strategy.replay(proposal, outcome)
            driver._count(proposal, outcome, before)
        lost: list[Proposal] = []
        for proposal, handle in in_flight:
            strategy.mark_pending(proposal)
            if handle is None:
                lost.append(proposal)
            else:
                driver.in_flight[handle] = proposal
        if lost:
            for handle, proposal in zip(evaluator.submit(lost), lost, strict=True):
                driver.in_flight[handle] = proposal
        return driver

    # -- the loop --------------------------------------------------------------------------------
    def _stopping(self) -> bool:
        if self.strategy.finished():
            self.stop_reason = self.strategy.tracker.stop_reason() or "strategy has nothing left to propose"
            return True
        if self.tracker.exhausted():
            self.stop_reason = self.tracker.stop_reason()
            return True
        return False

    def fill(self) -> list[Proposal]:
        """Top the round up to ``batch_size`` proposals in flight."""
        if self._stopping():
            return []
        want = self.batch_size - len(self.in_flight)
        left = self.tracker.evals_left(len(self.in_flight))
        if left is not None:
            want = min(want, left)
        proposals = self.strategy.ask(want) if want > 0 else []
        if proposals:
            for handle, proposal in zip(self.evaluator.submit(proposals), proposals, strict=True):
                self.in_flight[handle] = proposal
        self.fills.append((self._evals, len(self.in_flight)))
        return proposals

    def collect(self, timeout: float) -> int:
        """Tell the strategy every outcome that has landed; returns how many."""
        handles = list(self.in_flight)
        if not handles:
            return 0
        landed = 0
        for handle, outcome in zip(handles, self.evaluator.results(handles, timeout), strict=True):
            if outcome is None:
                continue
            proposal = self.in_flight.pop(handle)
            before = self.strategy.best()
            self.strategy.tell(proposal, outcome)
            self._count(proposal, outcome, before)
            landed += 1
            if self.on_result is not None:
                self.on_result(proposal, outcome)
        return landed

    def step(self) -> bool:
        """One fill-and-collect; False once the search is over (stopped and nothing in flight)."""
        self.fill()
        if not self.in_flight:
            if self.stop_reason is None:
                # Nothing in flight and nothing proposed: the strategy waits on results that will never
                # come. That is a strategy bug; say so rather than spin.
                self.stop_reason = "strategy proposed nothing with nothing in flight"
            return False
        self.collect(self.poll_s)
        return True

    def run(self, *, deadline_s: float | None = None) -> SearchProgress:
        """Drive to the end. In-flight proposals are awaited after a stop so no device time is wasted."""
        start = time.monotonic()
        while self.step():
            if deadline_s is not None and time.monotonic() - start > deadline_s:
                self.stop_reason = f"driver deadline of {deadline_s} s"
                break
        return self.progress()

    def _count(self, proposal: Proposal, outcome: Outcome, best_before: tuple[Config, float] | None) -> None:
        best = self.strategy.best()
        improved = best is not None and (best_before is None or best[1] < best_before[1])
        self.tracker.record(outcome, full=proposal.fidelity == "full", improved=improved)
        self._evals += 1
        self._cost_s += outcome.cost_s
        self.history.append(BestPoint(evaluations=self._evals, cost_s=self._cost_s,
                                      value_us=best[1] if best else None, config=best[0] if best else None))

    def progress(self) -> SearchProgress:
        best = self.strategy.best()
        return SearchProgress(
            strategy=self.strategy.name, evaluations=self._evals, cost_s=self._cost_s,
            in_flight=len(self.in_flight), best_config=best[0] if best else None,
            best_value_us=best[1] if best else None,
            finished=not self.in_flight and self.stop_reason is not None, stop_reason=self.stop_reason,
            history=list(self.history))


# -- evaluators ----------------------------------------------------------------------------------
class ReplayEvaluator:
    """Answers from a recorded Landscape, in process. Outcomes are ready at once; ``submitted`` counts
    every evaluation ever started (tests use it to prove nothing is re-run)."""

    def __init__(self, landscape: Landscape, ms: int | Sequence[int], *, noise_seed: int | None = None) -> None:
        self.landscape = landscape
        self.ms = [ms] if isinstance(ms, int) else list(ms)
        self.rng = np.random.default_rng(noise_seed) if noise_seed is not None else None
        self.submitted: list[Proposal] = []
        self._done: dict[int, Outcome] = {}
        self._lock = threading.Lock()

    def evaluate(self, proposal: Proposal) -> Outcome:
        with self._lock:  # numpy Generators are not thread-safe
            return self.landscape.outcome(proposal.config, self.ms, proposal.fidelity, self.rng)

    def submit(self, proposals: Sequence[Proposal]) -> list[Handle]:
        handles = []
        for p in proposals:
            handle = len(self.submitted)
            self.submitted.append(p)
            self._done[handle] = self.evaluate(p)
            handles.append(handle)
        return handles

    def results(self, handles: Sequence[Handle], timeout: float) -> list[Outcome | None]:
        return [self._done.pop(h, None) for h in handles]  # type: ignore[call-overload]


class ThreadPoolEvaluator:
    """Runs ``evaluate(proposal)`` on a thread pool: results land out of order and later than submit,
    as they do from Celery workers. Tracks the most evaluations that ran at once."""

    def __init__(self, evaluate: Callable[[Proposal], Outcome], *, max_workers: int) -> None:
        self._evaluate = evaluate
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="search-eval")
        self._futures: dict[int, Future[Outcome]] = {}
        self._next = 0
        self._lock = threading.Lock()
        self.running = 0
        self.peak_running = 0
        self.submitted = 0

    def _run(self, proposal: Proposal) -> Outcome:
        with self._lock:
            self.running += 1
            self.peak_running = max(self.peak_running, self.running)
        try:
            return self._evaluate(proposal)
        finally:
            with self._lock:
                self.running -= 1

    def submit(self, proposals: Sequence[Proposal]) -> list[Handle]:
        handles = []
        for p in proposals:
            self._futures[self._next] = self._pool.submit(self._run, p)
            handles.append(self._next)
            self._next += 1
            self.submitted += 1
        return handles

    def results(self, handles: Sequence[Handle], timeout: float) -> list[Outcome | None]:
        futures = [self._futures[h] for h in handles]  # type: ignore[index]
        if futures and not any(f.done() for f in futures):
            wait(futures, timeout=timeout, return_when=FIRST_COMPLETED)
        out: list[Outcome | None] = []
        for h, f in zip(handles, futures):
            if f.done():
                del self._futures[h]  # type: ignore[arg-type]
                out.append(f.result())
            else:
                out.append(None)
        return out

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)

    def __enter__(self) -> "ThreadPoolEvaluator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
