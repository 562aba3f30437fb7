"""Tree-structured Parzen estimator search through Optuna's TPESampler (ask/tell interface).

A numeric parameter (tile sizes, split-K, warps, stages) is an ordinal: Optuna sees the index of its value
in the sorted list of values that occur in at least one valid point, as an integer distribution, so the
Parzen estimator's kernels carry over to neighbouring values (BLOCK_K 256 says something about 512);
as a categorical, each value would be learnt alone. Any other parameter is categorical.
Optuna knows nothing of the constraints, so it may propose an invalid combination: that trial is told
PRUNED at once and never leaves this module (no evaluation is spent on it). Optuna puts pruned trials
without intermediate values in its "bad" group, so it learns to avoid the invalid region.

Local steps (``local_per_round``, default 2; 0 is plain TPE): each round's first proposals are unseen
neighbours (one parameter changed, an ordinal by one place, tried in a seeded random order) of the
``local_top`` best results so far; TPE fills the rest. On the two landscapes measured on the H200 they cut
the median evaluations to within 3% of the best from 22 to 17.5 (Triton) and 18 to 16 (CuTe); on the
synthetic landscape the medians were equal or lower at every M and the p90 lower
(bench/results/2026-12-03-search-*.md: rows tpe and tpe_plain; -synthetic-tpe-local.md).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.trial import Trial, TrialState, create_trial

from search.space import Config, ConfigSpace
from search.strategies.base import Budget, Outcome, Proposal, SearchStrategy

# Optuna logs one INFO line per trial; a search of hundreds of trials per worker round would drown
# the service log.
optuna.logging.set_verbosity(optuna.logging.WARNING)


class TPESearch(SearchStrategy):
    name = "tpe"

    def __init__(self, space: ConfigSpace, shape: Mapping[str, Any], *, budget: Budget | None = None,
                 seed: int = 0, limits: Mapping[str, Any] | None = None, n_startup_trials: int = 10,
                 max_model_asks: int | None = None, first: Sequence[Config] = (), local_per_round: int = 2,
                 local_top: int = 1) -> None:
        """``max_model_asks``: how many invalid or already-seen proposals Optuna may make in one ``ask(n)``
        (default 2n + 4) before the rest of the round falls back to seeded random unseen points: a
        converged TPE keeps proposing its favourites, and each wasted Optuna ask costs milliseconds. ``first``: valid configs
        evaluated before anything Optuna proposes (transfer seeds)."""
        super().__init__(space, shape, budget=budget, seed=seed, limits=limits)
        self.max_model_asks = max_model_asks
        self._domains: dict[str, list[Any]] = {
            name: [v for v in domain if any(c[name] == v and type(c[name]) is type(v) for c in self.valid_points)]
            for name, domain in space.params.items()
        }
        self._ordinal = {name for name, values in self._domains.items()
                         if len(values) > 1 and all(_is_number(v) for v in values)}
        for name in self._ordinal:
            self._domains[name].sort()
        self.distributions: dict[str, BaseDistribution] = {
            name: IntDistribution(0, len(values) - 1) if name in self._ordinal else CategoricalDistribution(values)
            for name, values in self._domains.items()
        }
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(
                seed=seed, n_startup_trials=min(n_startup_trials, len(self.valid_points)),
                # multivariate: tile sizes, split-K and warps interact; independent marginals miss that.
                multivariate=True,
                # constant_liar: a round keeps several trials running; without it they all look alike.
                constant_liar=True)
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self._waiting: dict[str, list[Trial]] = {}  # proposal key -> Optuna trials awaiting its outcome
        self._first = [dict(c) for c in first]
        fallback = np.random.default_rng([seed, 0x7E5]).permutation(len(self.valid_points))
        self._fallback = [self.valid_points[i] for i in fallback]
        self._fallback_cursor = 0
        self.invalid_asks = 0  # Optuna proposals dropped as invalid (never evaluated, never counted)
        self.fallback_proposals = 0
        self.local_per_round, self.local_top = local_per_round, local_top
        self.local_proposals = 0
        # Valid points by their encoding, for the neighbour look-up of the local steps.
        self._names = list(space.params)
        self._by_code = {self._code(c): c for c in self.valid_points}
        self._by_key = {Proposal(config=c).key: c for c in self.valid_points}
        self._local_rng = np.random.default_rng([seed, 0x10C])  # the order neighbours are tried in

    def _config_of(self, trial: Trial) -> Config:
        return {name: self._domains[name][trial.params[name]] if name in self._ordinal else trial.params[name]
                for name in self.space.params}

    def _encode(self, config: Config) -> dict[str, Any]:
        """Optuna's params for a config: an ordinal parameter's index in its sorted values."""
        return {name: self._domains[name].index(config[name]) if name in self._ordinal else config[name]
                for name in self.space.params}

    def _ask_fixed(self, config: Config) -> Trial:
        """A trial with given params, so Optuna's model knows the point is being evaluated."""
        self.study.enqueue_trial(self._encode(config))
        trial = self.study.ask(self.distributions)
        assert self._config_of(trial) == config, (self._config_of(trial), config)
        return trial

    def _propose(self, n: int) -> list[Proposal]:
        out: list[Proposal] = []
        taken: set[str] = set()

        def take(config: Config, trial: Trial) -> None:
            p = Proposal(config=config)
            out.append(p)
            taken.add(p.key)
            self._waiting[p.key] = [trial]

        while self._first and len(out) < n:
            config = self._first.pop(0)
            if self.is_valid(config) and not self.seen(config) and Proposal(config=config).key not in taken:
                take(config, self._ask_fixed(config))

        if self.results and self.local_per_round:
            for config in self._local_candidates()[:min(self.local_per_round, n - len(out))]:
                if Proposal(config=config).key not in taken:
                    take(config, self._ask_fixed(config))
                    self.local_proposals += 1

        model_asks, max_model_asks = 0, self.max_model_asks or 2 * n + 4
        while len(out) < n and model_asks < max_model_asks:
            trial = self.study.ask(self.distributions)
            config = self._config_of(trial)
            key = Proposal(config=config).key
            if not self.is_valid(config):
                self.study.tell(trial, state=TrialState.PRUNED)
                self.invalid_asks += 1
                model_asks += 1
            elif key in self.results:
                self._tell_trial(trial, self.results[key])  # known already: answer from the record
                model_asks += 1
            elif key in self.pending or key in taken:
                self._waiting.setdefault(key, []).append(trial)  # answered when that result lands
                model_asks += 1
            else:
                take(config, trial)

        while len(out) < n and self._fallback_cursor < len(self._fallback):
            config = self._fallback[self._fallback_cursor]
            self._fallback_cursor += 1
            if not self.seen(config) and Proposal(config=config).key not in taken:
                take(config, self._ask_fixed(config))
                self.fallback_proposals += 1
        return out

    def _code(self, config: Config) -> tuple[Any, ...]:
        enc = self._encode(config)
        return tuple(enc[name] for name in self._names)

    def _neighbours(self, config: Config) -> list[Config]:
        """Valid points one step away: one parameter changed, an ordinal by one place in its values."""
        code = self._code(config)
        out = []
        for i, name in enumerate(self._names):
            if name in self._ordinal:
                steps = [code[i] - 1, code[i] + 1]
            else:
                steps = [v for v in self._domains[name] if v != code[i]]
            for v in steps:
                other = self._by_code.get(code[:i] + (v,) + code[i + 1:])
                if other is not None:
                    out.append(other)
        return out

    def _local_candidates(self) -> list[Config]:
        """Unseen neighbours of the best full results so far, best centre first, each centre's neighbours
        in a seeded random order (a fixed order would favour whichever parameter comes first)."""
        ranked = sorted((o.value_us, k) for k, o in self.results.items()
                        if o.ok and o.value_us is not None and k in self._by_key)  # full-fidelity results only
        out: list[Config] = []
        keys: set[str] = set()
        for _, key in ranked[:self.local_top]:
            around = self._neighbours(self._by_key[key])
            for i in self._local_rng.permutation(len(around)):
                c = around[i]
                k = Proposal(config=c).key
                if k not in keys and not self.seen(c):
                    keys.add(k)
                    out.append(c)
        return out

    def _exhausted(self) -> bool:
        while self._fallback_cursor < len(self._fallback) and self.seen(self._fallback[self._fallback_cursor]):
            self._fallback_cursor += 1
        return self._fallback_cursor >= len(self._fallback)

    def _tell_trial(self, trial: Trial, outcome: Outcome) -> None:
        if outcome.ok:
            self.study.tell(trial, outcome.value_us)
        else:
            # A config that fails to compile or check is the worst possible point; FAIL would make TPE
            # ignore it and propose its neighbourhood again.
            self.study.tell(trial, state=TrialState.PRUNED)

    def _on_tell(self, proposal: Proposal, outcome: Outcome) -> None:
        for trial in self._waiting.pop(proposal.key, []):
            self._tell_trial(trial, outcome)

    def _on_replay(self, proposal: Proposal, outcome: Outcome) -> None:
        if proposal.key in self._waiting:
            self._on_tell(proposal, outcome)
            return
        self.study.add_trial(create_trial(
            params=self._encode(proposal.config), distributions=self.distributions,
            value=outcome.value_us if outcome.ok else None,
            state=TrialState.COMPLETE if outcome.ok else TrialState.PRUNED))

    def _on_mark_pending(self, proposal: Proposal) -> None:
        self._waiting[proposal.key] = [self._ask_fixed(dict(proposal.config))]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
