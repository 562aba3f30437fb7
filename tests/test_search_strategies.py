"""Search strategies against a small synthetic landscape (search.landscape.synthetic_gemm_landscape: a
roofline model, not measurements)."""

from __future__ import annotations

import math

import pytest

from search.driver import ReplayEvaluator, SearchDriver
from search.landscape import Landscape, synthetic_gemm_landscape
from search.space import ConfigSpace
from search.strategies import STRATEGIES, Budget, Outcome, Proposal, TransferSeed, make_strategy, nearest_seeds
from search.strategies.successive_halving import SuccessiveHalving
from search.strategies.tpe import TPESearch

SPACE = {"BLOCK_N": [32, 64, 128, 256], "BLOCK_K": [64, 128, 256], "SPLIT_K": {"pow2": [1, 8]},
         "num_warps": [4, 8], "num_stages": {"range": [2, 4]},
         "constraints": ["BLOCK_K * SPLIT_K <= K", "BLOCK_N <= N"]}
# A smaller space (72 raw points) where running every strategy to the end takes a second.
SMALL_SPACE = {"BLOCK_N": [32, 64, 128], "BLOCK_K": [64, 128], "SPLIT_K": {"pow2": [1, 4]}, "num_warps": [4, 8],
               "num_stages": [3, 4], "constraints": ["BLOCK_K * SPLIT_K <= K"]}
DIMS = {"N": 2112, "K": 1536}
M = 1


@pytest.fixture(scope="module")
def landscape() -> Landscape:
    return synthetic_gemm_landscape(SPACE, DIMS, [1, 8], seed=0)


@pytest.fixture(scope="module")
def small_landscape() -> Landscape:
    return synthetic_gemm_landscape(SMALL_SPACE, DIMS, [1], seed=1)


def run(landscape: Landscape, name: str, *, seed: int, budget: Budget, batch_size: int = 4,
        noise_seed: int | None = None, **options: object) -> tuple[SearchDriver, ReplayEvaluator]:
    strategy = make_strategy(name, landscape.space(), landscape.shape_for(M), budget=budget, seed=seed, **options)
    evaluator = ReplayEvaluator(landscape, M, noise_seed=noise_seed)
    driver = SearchDriver(strategy, evaluator, batch_size=batch_size)
    driver.run()
    return driver, evaluator


def test_landscape_is_marked_synthetic_and_has_failures(landscape: Landscape) -> None:
    assert landscape.meta.source == "synthetic"
    verdicts = {r.verdict for r in landscape.records}
    assert "ok" in verdicts and verdicts - {"ok"}, verdicts
    best_config, best = landscape.exhaustive_best(M)
    assert landscape.record(best_config, M).verdict == "ok"
    assert best < landscape.baseline(M)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_finds_the_exhaustive_best_given_the_whole_space(small_landscape: Landscape,
                                                                       name: str) -> None:
    landscape = small_landscape
    count = landscape.space().count(landscape.shape_for(M))
    # Successive halving spends extra short timings; give it room for them.
    budget = Budget(max_evals=2 * count if name == "successive_halving" else count)
    driver, evaluator = run(landscape, name, seed=3, budget=budget)
    best_config, best = landscape.exhaustive_best(M)
    progress = driver.progress()
    assert progress.best_config == best_config and progress.best_value_us == pytest.approx(best)
    assert progress.finished
    keys = [p.key for p in evaluator.submitted]
    assert len(keys) == len(set(keys)), "a point was evaluated twice"
    assert all(landscape.space().is_valid(p.config, landscape.shape_for(M)) for p in evaluator.submitted)


def test_tpe_gets_close_with_a_fraction_of_the_space(landscape: Landscape) -> None:
    """Within 3% of the best (3 of 264 points are) with 35% of the space, for most seeds, noisy timings.
    (Successive halving samples its rungs at random: it saves GPU-seconds, not evaluations.)"""
    count = landscape.space().count(landscape.shape_for(M))
    _, best = landscape.exhaustive_best(M)
    assert sum((landscape.objective(c, M) or math.inf) <= 1.03 * best for c in landscape.configs(M)) <= 5
    hits = 0
    for seed in range(4):
        driver, _ = run(landscape, "tpe", seed=seed, budget=Budget(max_evals=int(0.35 * count)), noise_seed=seed)
        config = driver.progress().best_config
        hits += landscape.objective(config, M) <= 1.03 * best
    assert hits >= 3, hits


def test_tpe_sees_numeric_parameters_as_ordinals_and_proposes_their_real_values() -> None:
    """Tile sizes are ordered: Optuna gets each as the index of its value (an integer distribution, so its
    kernels spread to neighbouring values); a string parameter stays categorical. Proposals carry the
    real values, typed as declared, and only valid ones."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    space = ConfigSpace.parse({"BLOCK_K": [512, 64, 256, 128], "SPLIT_K": {"pow2": [1, 8]}, "COMBINE": ["pairs", "grouped"],
                               "constraints": ["BLOCK_K * SPLIT_K <= K"]})
    strategy = TPESearch(space, {"M": 1, "K": 1024}, budget=Budget(max_evals=40), seed=0, n_startup_trials=3)
    assert isinstance(strategy.distributions["BLOCK_K"], IntDistribution)
    assert strategy.distributions["BLOCK_K"].high == 3 and strategy._domains["BLOCK_K"] == [64, 128, 256, 512]
    assert isinstance(strategy.distributions["SPLIT_K"], IntDistribution)  # 1..8, and 1024 rules out none
    assert isinstance(strategy.distributions["COMBINE"], CategoricalDistribution)
    seen = []
    while proposals := strategy.ask(3):
        for p in proposals:
            assert space.is_valid(p.config, {"M": 1, "K": 1024}), p.config
            assert isinstance(p.config["BLOCK_K"], int) and p.config["COMBINE"] in ("pairs", "grouped")
            seen.append(p.config)
            # faster with larger BLOCK_K * SPLIT_K: the model must learn to go there
            strategy.tell(p, Outcome.success(1000.0 / (p.config["BLOCK_K"] * p.config["SPLIT_K"]), cost_s=1.0))
    assert len(seen) == len({ConfigSpace.canonical(c) for c in seen})
    assert strategy.best()[0]["BLOCK_K"] * strategy.best()[0]["SPLIT_K"] == 1024


def test_tpe_local_steps_propose_the_unseen_neighbours_of_the_best_first() -> None:
    """local_per_round=2: after a round lands, the next round opens with two unseen points one step from
    the best result (one parameter changed; an ordinal by one place in its sorted values)."""
    space = ConfigSpace.parse({"BLOCK_K": [64, 128, 256, 512], "SPLIT_K": {"pow2": [1, 8]}, "num_warps": [2, 4, 8],
                               "constraints": ["BLOCK_K * SPLIT_K <= K"]})
    shape = {"M": 1, "K": 2048}
    strategy = TPESearch(space, shape, budget=Budget(max_evals=30), seed=3, n_startup_trials=4, local_per_round=2)
    order = {"BLOCK_K": [64, 128, 256, 512], "SPLIT_K": [1, 2, 4, 8], "num_warps": [2, 4, 8]}

    def value(c: dict) -> float:  # a smooth bowl around (256, 2, 4), no two points alike
        return 1.0 + sum(w * abs(order[k].index(c[k]) - order[k].index(v)) for w, (k, v) in
                         zip((1.0, 1.1, 1.23), {"BLOCK_K": 256, "SPLIT_K": 2, "num_warps": 4}.items()))

    first = strategy.ask(4)
    for p in first:
        strategy.tell(p, Outcome.success(value(p.config)))
    best = min(first, key=lambda p: value(p.config)).config
    nxt = strategy.ask(4)
    for p in nxt[:2]:
        changed = [k for k in best if p.config[k] != best[k]]
        assert len(changed) == 1, (best, p.config)
        k = changed[0]
        assert abs(order[k].index(p.config[k]) - order[k].index(best[k])) == 1, (best, p.config)
    assert strategy.local_proposals == 2
    for p in nxt:
        strategy.tell(p, Outcome.success(value(p.config)))
    while proposals := strategy.ask(4):  # hill-climbing plus TPE reaches the bottom of the bowl
        for p in proposals:
            strategy.tell(p, Outcome.success(value(p.config)))
    assert strategy.best()[1] == 1.0


def test_tpe_local_steps_are_a_search_option_of_the_api() -> None:
    from service.schemas import SearchCreate

    body = {"variant_id": 1, "deployment": {"spec": "kimi-k2-like", "tp": 8, "batch_sizes": [1]},
            "hardware": "replay", "strategy": "tpe"}
    assert SearchCreate(**body, options={"local_per_round": 2}).options == {"local_per_round": 2}
    with pytest.raises(ValueError, match="unknown strategy options"):
        SearchCreate(**body, options={"local_steps": 2})


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_same_seed_same_search_other_seed_other_search(landscape: Landscape, name: str) -> None:
    sequences = []
    for seed in (5, 5, 6):
        _, evaluator = run(landscape, name, seed=seed, budget=Budget(max_evals=30), noise_seed=11)
        sequences.append([p.key for p in evaluator.submitted])
    assert sequences[0] == sequences[1]
    if name != "exhaustive":
        assert sequences[0] != sequences[2]


def test_invalid_points_are_never_proposed_and_cost_no_evaluation() -> None:
    # Only a few of 8*8*8 = 512 raw points are valid: TPE proposes invalid ones and must drop them.
    space = ConfigSpace.parse({"a": {"range": [1, 8]}, "b": {"range": [1, 8]}, "c": {"range": [1, 8]},
                               "constraints": ["a + b + c == 12", "a <= b"]})
    valid = {space.canonical(c) for c in space.points({})}
    strategy = TPESearch(space, {}, budget=Budget(max_evals=len(valid)), seed=0, n_startup_trials=5)
    told = 0
    while not strategy.finished():
        proposals = strategy.ask(3)
        assert proposals, "TPE stalled"
        for p in proposals:
            assert space.canonical(p.config) in valid
            strategy.tell(p, Outcome.success(float(p.config["a"] * 10 + p.config["c"])))
            told += 1
    assert strategy.invalid_asks > 0  # Optuna did propose invalid combinations
    assert strategy.tracker.evals == told == len(valid)
    assert strategy.best() == ({"a": 1, "b": 8, "c": 3}, 13.0)


def test_failures_are_never_the_best() -> None:
    space = ConfigSpace.parse({"x": [1, 2, 3]})
    strategy = make_strategy("exhaustive", space, {})
    outcomes = {1: Outcome.failure("check_failed"), 2: Outcome.success(9.0), 3: Outcome.failure("compile_error")}
    for p in strategy.ask(3):
        strategy.tell(p, outcomes[p.config["x"]])
    assert strategy.best() == ({"x": 2}, 9.0)
    with pytest.raises(ValueError):
        Outcome(verdict="crash", value_us=1.0)
    with pytest.raises(ValueError):
        Outcome(verdict="ok")


def test_max_evals_and_cost_budgets(landscape: Landscape) -> None:
    driver, evaluator = run(landscape, "random", seed=0, budget=Budget(max_evals=17), batch_size=5)
    assert len(evaluator.submitted) == 17 and driver.progress().evaluations == 17
    driver, evaluator = run(landscape, "random", seed=0, budget=Budget(max_cost_s=30.0), batch_size=1)
    cost = driver.progress().cost_s
    spent_before_last = cost - landscape.outcome(evaluator.submitted[-1].config, M).cost_s
    assert cost >= 30.0 > spent_before_last


@pytest.mark.parametrize("name", ["random", "tpe"])
def test_patience_stops_after_k_evaluations_without_improvement(landscape: Landscape, name: str) -> None:
    patience = 6
    driver, _ = run(landscape, name, seed=2, budget=Budget(patience=patience), batch_size=1)
    values = [h.value_us for h in driver.history]
    last_improvement = max(i for i, v in enumerate(values) if i == 0 or (v is not None and
                                                                          (values[i - 1] is None or v < values[i - 1])))
    assert len(values) == last_improvement + 1 + patience
    assert "no improvement" in (driver.stop_reason or "")
    assert len(values) < landscape.space().count(landscape.shape_for(M))


def test_successive_halving_promotes_only_the_best_shorts(landscape: Landscape) -> None:
    strategy = SuccessiveHalving(landscape.space(), landscape.shape_for(M), seed=1, eta=3, rung_size=12,
                                 budget=Budget(max_evals=64))
    evaluator = ReplayEvaluator(landscape, M, noise_seed=4)
    SearchDriver(strategy, evaluator, batch_size=5).run()
    assert len(strategy.brackets) >= 2
    fulls = [p for p in evaluator.submitted if p.fidelity == "full"]
    for bracket in strategy.brackets:
        shorts = [(strategy.results[Proposal(config=c, fidelity="short").key], c) for c in bracket["short"]]
        ranked = sorted([(o.value_us, i) for i, (o, _) in enumerate(shorts) if o.ok])
        expected = [shorts[i][1] for _, i in ranked[:math.ceil(len(shorts) / 3)]]
        assert bracket["promoted"] == expected
    promoted = [c for b in strategy.brackets for c in b["promoted"]]
    assert all(p.config in promoted for p in fulls)
    # Every full evaluation came after its bracket's shorts were all told.
    first_full = evaluator.submitted.index(fulls[0])
    assert all(p.fidelity == "short" for p in evaluator.submitted[:first_full])
    assert first_full >= 12
    # best() reads full-fidelity results only.
    best_config, best_value = strategy.best()
    assert Proposal(config=best_config).key in strategy.results
    full_values = [o.value_us for k, o in strategy.results.items() if k.startswith("full:") and o.ok]
    assert best_value == min(full_values)


def test_transfer_evaluates_seeds_first_nearest_first(landscape: Landscape) -> None:
    known = [({**DIMS, "M": 8}, {"BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 2, "num_warps": 4, "num_stages": 3}),
             ({**DIMS, "M": 64}, {"BLOCK_N": 128, "BLOCK_K": 64, "SPLIT_K": 1, "num_warps": 8, "num_stages": 4}),
             ({**DIMS, "K": 1024, "M": 4}, {"BLOCK_N": 64, "BLOCK_K": 64, "SPLIT_K": 1, "num_warps": 8, "num_stages": 2}),
             ({**DIMS, "M": 2}, {"BLOCK_N": 32, "BLOCK_K": 256, "SPLIT_K": 4, "num_warps": 4, "num_stages": 2}),
             ({"N": 7168, "K": 1024, "M": 1}, {"BLOCK_N": 32, "BLOCK_K": 64, "SPLIT_K": 1, "num_warps": 4, "num_stages": 2})]
    seeds = nearest_seeds(known, landscape.shape_for(M), k=3)
    # |log2| distances: M=2 -> 1, M=8 -> 3, (K=1024, M=4) -> 0.58 + 2, M=64 -> 6, other N and K -> 2.35.
    assert [s.source for s in seeds] == [ConfigSpace.canonical({**DIMS, "M": 2}),
                                         ConfigSpace.canonical({"N": 7168, "K": 1024, "M": 1}),
                                         ConfigSpace.canonical({**DIMS, "K": 1024, "M": 4})]
    # BLOCK_K 256 x SPLIT_K 8 > K: not valid here, must be skipped.
    invalid = TransferSeed(config={"BLOCK_N": 32, "BLOCK_K": 256, "SPLIT_K": 8, "num_warps": 4, "num_stages": 2},
                           distance=0.5)
    driver, evaluator = run(landscape, "transfer", seed=0, budget=Budget(max_evals=20), seeds=[*seeds, invalid])
    assert [p.config for p in evaluator.submitted[:3]] == [s.config for s in seeds]
    assert driver.strategy.skipped_seeds == [invalid]
    assert len(evaluator.submitted) == 20


def test_a_partial_landscape_narrows_to_exactly_its_measured_points() -> None:
    full = synthetic_gemm_landscape(SPACE, DIMS, [1, 8], seed=0)
    configs = full.configs([1, 8])
    # a step cut short: some points missing at M=1 only, some at both Ms
    only_m1 = {ConfigSpace.canonical(c) for c in configs[::3]}
    both = {ConfigSpace.canonical(c) for c in configs[1::5]}
    partial = Landscape(full.meta, [r for r in full.records if ConfigSpace.canonical(r.config) not in both
                                    and not (r.m == 1 and ConfigSpace.canonical(r.config) in only_m1)])
    assert full.is_complete() and not partial.is_complete()
    narrowed = partial.measured_subspace()
    assert narrowed.is_complete()
    kept = {ConfigSpace.canonical(c) for c in configs} - only_m1 - both
    assert kept and {ConfigSpace.canonical(c) for c in narrowed.configs(1)} == kept
    assert {ConfigSpace.canonical(c) for c in narrowed.configs(8)} == kept
    for m in (1, 8):  # every point of the narrowed space answers from a record
        for c in narrowed.configs(m):
            narrowed.record(c, m)
    assert "narrowed" in narrowed.meta.notes and narrowed.meta.source == full.meta.source


def _per_m(full: Landscape, m: int, **meta: object) -> Landscape:
    return Landscape(full.meta.model_copy(update={"ms": [m], **meta}), [r for r in full.records if r.m == m])


def test_landscapes_of_one_variant_at_different_ms_merge_into_one(tmp_path) -> None:
    """One device step per M gives one file per M; merged, they answer exactly as one recording of both Ms
    would, and the benchmark's transfer row seeds each M from the other."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from search.landscape import LandscapeError

    full = synthetic_gemm_landscape(SPACE, DIMS, [1, 8], seed=0)
    m1, m8 = _per_m(full, 1, commit="aaa"), _per_m(full, 8, commit="bbb")
    merged = Landscape.merge([m8, m1])
    assert merged.meta.ms == [1, 8] and merged.is_complete() and merged.meta.commit == "bbb+aaa"
    for m in (1, 8):
        assert merged.exhaustive_best(m) == full.exhaustive_best(m)
        for c in full.configs(m)[::7]:
            assert merged.objective(c, m) == full.objective(c, m)
    with pytest.raises(LandscapeError, match="an M is in more than one"):
        Landscape.merge([m1, m1])
    with pytest.raises(LandscapeError, match="space differs"):
        Landscape.merge([m1, _per_m(full, 8, space={**SPACE, "num_warps": [4]})])
    with pytest.raises(LandscapeError, match="recorded on"):
        Landscape.merge([m1, _per_m(full, 8, hardware={"hardware_key": "other-gpu"})])

    paths = [m1.save(tmp_path / "m1.json"), m8.save(tmp_path / "m8.json")]
    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "bench/search_benchmark.py", "--merge", "--allow-synthetic", *map(str, paths),
                          "--strategies", "random", "transfer", "--seeds", "2", "--out", str(tmp_path / "res")],
                         cwd=repo, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    (res,) = (tmp_path / "res").glob("*-search-merged-m1.json")
    rows = json.loads(res.read_text())["rows"]
    assert [r["target"] for r in rows] == ["M=1", "M=8"]
    assert all("transfer" in r["strategies"] for r in rows)  # seeded from the other M of the merged file
