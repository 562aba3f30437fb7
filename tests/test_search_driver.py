"""The search driver: rounds kept full, budgets, progress, and resuming without re-running anything.
Timings come from a synthetic landscape (a roofline model, not measurements)."""

from __future__ import annotations

import time

import pytest

from search.driver import ReplayEvaluator, SearchDriver, ThreadPoolEvaluator
from search.landscape import Landscape, synthetic_gemm_landscape
from search.strategies import Budget, Outcome, Proposal, make_strategy

SPACE = {"BLOCK_N": [32, 64, 128, 256], "BLOCK_K": [64, 128, 256], "SPLIT_K": {"pow2": [1, 8]},
         "num_warps": [4, 8], "num_stages": {"range": [2, 4]},
         "constraints": ["BLOCK_K * SPLIT_K <= K", "BLOCK_N <= N"]}
DIMS = {"N": 2112, "K": 1536}
MS = [9, 16]  # one batch bucket (9-16): the objective is the summed time over both


@pytest.fixture(scope="module")
def landscape() -> Landscape:
    return synthetic_gemm_landscape(SPACE, DIMS, MS, seed=2)


def strategy(landscape: Landscape, name: str, budget: Budget, seed: int = 0):  # type: ignore[no-untyped-def]
    return make_strategy(name, landscape.space(), landscape.shape_for(MS), budget=budget, seed=seed)


@pytest.mark.parametrize("name", ["random", "tpe", "successive_halving"])
def test_keeps_batch_size_in_flight_on_a_thread_pool(landscape: Landscape, name: str) -> None:
    batch_size, budget = 4, 30
    replay = ReplayEvaluator(landscape, MS, noise_seed=0)

    def slow_evaluate(p: Proposal) -> Outcome:
        time.sleep(0.01)  # results land later than submit and out of order, as from workers
        return replay.evaluate(p)

    with ThreadPoolEvaluator(slow_evaluate, max_workers=8) as pool:
        driver = SearchDriver(strategy(landscape, name, Budget(max_evals=budget)), pool, batch_size=batch_size,
                              poll_s=0.005)
        progress = driver.run()
    assert progress.evaluations == pool.submitted == budget
    assert pool.peak_running == batch_size  # never more than a round, and the round was really parallel
    assert driver.fills
    for told, in_flight in driver.fills:
        if name == "successive_halving":  # it drains a rung before promoting: rounds may run short then
            assert in_flight <= min(batch_size, budget - told)
        else:
            assert in_flight == min(batch_size, budget - told), driver.fills


def test_bucket_objective_and_progress_history(landscape: Landscape) -> None:
    driver = SearchDriver(strategy(landscape, "exhaustive", Budget()), ReplayEvaluator(landscape, MS), batch_size=3)
    progress = driver.run()
    best_config, best = landscape.exhaustive_best(MS)
    assert progress.best_config == best_config and progress.best_value_us == pytest.approx(best)
    assert best == pytest.approx(sum(landscape.record(best_config, m).median_us for m in MS))
    values = [h.value_us for h in progress.history if h.value_us is not None]
    assert values == sorted(values, reverse=True)  # best-so-far never gets worse
    assert [h.evaluations for h in progress.history] == list(range(1, progress.evaluations + 1))
    assert progress.stop_reason == "strategy has nothing left to propose" and progress.finished


def test_driver_budget_on_gpu_seconds(landscape: Landscape) -> None:
    driver = SearchDriver(strategy(landscape, "random", Budget()), ReplayEvaluator(landscape, MS), batch_size=2,
                          budget=Budget(max_cost_s=60.0))
    progress = driver.run()
    assert progress.cost_s >= 60.0 and "max_cost_s" in (progress.stop_reason or "")
    # At most one round past the limit: the in-flight round is awaited, not wasted.
    assert progress.cost_s - 60.0 < 2 * max(r.cost_s for r in landscape.records)


@pytest.mark.parametrize("name", ["random", "tpe", "successive_halving", "exhaustive"])
@pytest.mark.parametrize("lost_runs", [False, True])
def test_resume_never_reruns_finished_points(landscape: Landscape, name: str, lost_runs: bool) -> None:
    budget = Budget(max_evals=40)
    evaluator = ReplayEvaluator(landscape, MS, noise_seed=1)
    finished: list[tuple[Proposal, Outcome]] = []
    first = SearchDriver(strategy(landscape, name, budget), evaluator, batch_size=5,
                         on_result=lambda p, o: finished.append((p, o)))
    while len(finished) < 17:  # interrupted mid-search, with a round in flight
        first.fill()
        first.collect(timeout=0.0)
        first.fill()
    in_flight = list(first.in_flight.items())
    assert in_flight, "the interruption should leave runs in flight"
    submitted_before = len(evaluator.submitted)

    if lost_runs:  # the worker died: the caller re-submits; a fresh evaluator (new process) answers
        evaluator = ReplayEvaluator(landscape, MS, noise_seed=1)
        resumed_in_flight = [(p, None) for _, p in in_flight]
    else:  # the runs are still queued: re-await their handles
        resumed_in_flight = [(p, h) for h, p in in_flight]
    second = SearchDriver.resume(strategy(landscape, name, budget), evaluator, batch_size=5, budget=budget,
                                 finished=finished, in_flight=resumed_in_flight)
    progress = second.run()

    finished_keys = {p.key for p, _ in finished}
    rerun = [p.key for p in evaluator.submitted[0 if lost_runs else submitted_before:] if p.key in finished_keys]
    assert rerun == []
    assert progress.evaluations == 40
    all_keys = [p.key for p, _ in finished] + [p.key for p in evaluator.submitted[0 if lost_runs else submitted_before:]]
    if lost_runs:
        assert [p.key for p in evaluator.submitted[:len(in_flight)]] == [p.key for _, p in in_flight]
    else:
        all_keys += [p.key for _, p in in_flight]
    assert len(all_keys) == len(set(all_keys)) == 40
