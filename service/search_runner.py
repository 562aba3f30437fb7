"""The search driver as it runs in the service: search.SearchDriver over the database and the broker.

``drive(search_id)`` (the kt.drive_search task on kt.control) claims the search's driver lease, then for
every target not yet finished builds the strategy and resumes it from the runs the database holds
(finished proposals are replayed into the strategy, never re-run; in-flight ones are awaited), and
drives all targets in one loop until each stops. DbEvaluator is the Evaluator: ``submit`` creates the
proposals' runs (linked to the search, with their fidelity) and enqueues them on the hardware queue;
``results`` answers from the database, where the workers' record_result writes the verdicts.

One look for the whole search: the targets' evaluators share a LandedRuns, which asks the database which
of the search's in-flight runs have finished (ids only, one query) every KT_SEARCH_POLL_S; each target
then loads the rows of its landed proposals only. The loop sleeps one poll per pass, so a result is
told and its slot refilled within about one poll whatever the number of targets (before: each target
looked, and slept a poll when nothing of its own had landed, in turn; with runs longer than a poll a
pass took up to T polls for T targets, and so did noticing a result).

Throughput: with ``batch_size`` = the queue's workers, a worker that finishes a run waits for the
driver (the poll, the ask, the insert, the broker) before its next run starts: about half a poll on
average (bench/results/2026-12-03-cpu-search-distribution.md has the breakdown). ``batch_size`` = 2 x
workers keeps one run queued ahead of each worker, so it starts its next run at once and the driver's
reaction is hidden behind a run. The price is adaptivity: a model-based strategy (tpe) proposes with
fewer results told (and more pending points lied about) per proposal; random and exhaustive lose
nothing.

KT_SEARCH_TRACE=<file>: append one JSON line per submit (asked/committed/enqueued times) and per landed
proposal (when the driver saw it) -- bench/search_distribution.py times the driver's side with it.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from db.models import Run, Search, Variant
from db.queries import runs as runs_q
from db.queries import searches as q
from db.session import default_session_factory
from kernels.slots.base import Shape
from search.driver import SearchDriver
from search.space import ConfigSpace
from search.strategies import Budget, Outcome, Proposal, SearchStrategy, make_strategy, nearest_seeds
from service.search_dispatch import lease_seconds
from service.settings import Settings

log = logging.getLogger("kerneltune.searches")

EnqueueFn = Callable[[list[str], str], object]


def poll_seconds() -> float:
    """How often the driver looks for finished runs (jittered, see LandedRuns.wait). 0.05 s: a look is one
    primary-key query for the whole search, so this is the query rate the driver had at 0.1 s, when it
    made two row-loading queries per poll (bench/results/2026-12-03-cpu-search-distribution.md)."""
    return float(os.environ.get("KT_SEARCH_POLL_S") or 0.05)


FINISHED = ("done", "cancelled")  # terminal: record_result and cancel write a run once


class LandedRuns:
    """Which in-flight runs of one search have finished, for all its targets at once.

    Evaluators ``watch`` the run ids they wait on; ``look`` asks the database which of them are
    finished (one query on the primary key, ids only, on a plain connection: about 1 ms of CPU, 40%
    less than through an ORM session) and moves them to ``finished``, where the evaluators pick them
    up (``take``) and load only those rows."""

    _FINISHED_IDS = select(Run.__table__.c.id).where(Run.__table__.c.id.in_(bindparam("ids", expanding=True)),
                                                     Run.__table__.c.status.in_(FINISHED))

    def __init__(self, factory: sessionmaker[Session], search_id: int | None = None) -> None:
        self.factory, self.search_id = factory, search_id
        with factory() as session:
            self.engine = session.get_bind()
        self.rng = random.Random()
        self.watching: set[str] = set()
        self.finished: set[str] = set()
        self.looks = 0

    def watch(self, run_ids: Sequence[str]) -> None:
        self.watching.update(rid for rid in run_ids if rid not in self.finished)

    def look(self) -> int:
        """How many watched runs were newly found finished."""
        if not self.watching:
            return 0
        self.looks += 1
        t0 = time.time()
        with self.engine.connect() as conn:
            done = set(conn.execute(self._FINISHED_IDS, {"ids": list(self.watching)}).scalars())
        if os.environ.get("KT_SEARCH_TRACE"):
            _trace("look", search=self.search_id, t0=t0, t1=time.time(), found=sorted(done),
                   watching=len(self.watching))
        self.watching -= done
        self.finished |= done
        return len(done)

    def wait(self, timeout: float) -> int:
        """Sleep about ``timeout`` (0.5x to 1.5x, at random), then look: the poll rate stays bounded
        whatever the number of targets. The jitter keeps the looks from locking onto runs of one length:
        at a fixed period, a run submitted right after a look and lasting a little over a multiple of
        the period lands just after a look every time and waits a whole poll (the replay device at
        0.1 s, 0.5 s runs: 117 ms from a result to the driver at a fixed period, 74-80 ms jittered)."""
        if timeout > 0:
            time.sleep(timeout * self.rng.uniform(0.5, 1.5))
        return self.look()

    def take(self, run_ids: Sequence[str]) -> None:
        self.finished.difference_update(run_ids)


def _trace(event: str, **fields: Any) -> None:
    path = os.environ.get("KT_SEARCH_TRACE")
    if not path:
        return
    with open(path, "a") as fh:  # one short line per write: appends from threads do not interleave
        fh.write(json.dumps({"ev": event, **fields}, separators=(",", ":")) + "\n")


def outcome_of(p: q.ProposalRuns) -> Outcome:
    """A proposal's outcome: ok with the summed median over its Ms, or the first failing verdict."""
    if p.passed:
        return Outcome.success(p.median_us or 0.0, cost_s=p.cost_s)
    return Outcome.failure(p.verdict if p.verdict != "passed" else "error", cost_s=p.cost_s)


def budget_of(search: Search) -> Budget:
    b = search.budget or {}
    return Budget(max_evals=b.get("max_evals"), max_cost_s=b.get("max_gpu_seconds"), patience=b.get("patience"))


def target_shape(target: dict[str, Any]) -> dict[str, Any]:
    """What the strategy enumerates with: the shape's build argument at the target's largest M (as
    search.landscape.shape_for does for a bucket)."""
    return Shape.from_json(target["shape"]).as_build_arg(max(target["ms"]))


LINEAGE_DEPTH = 8  # ancestors whose runs seed a transfer search (a chain of tweaks, not the whole tree)


def lineage(session: Session, variant_id: int) -> list[int]:
    """This variant, then its parent, grandparent, ... (provenance.parent_id), at most LINEAGE_DEPTH back."""
    out: list[int] = []
    vid: int | None = variant_id
    while vid is not None and vid not in out and len(out) <= LINEAGE_DEPTH:
        out.append(vid)
        vid = session.scalar(select(Variant.parent_id).where(Variant.id == vid))
    return out


def inherit(config: dict[str, Any], space: ConfigSpace) -> dict[str, Any]:
    """An ancestor's config in this variant's space: the parameters the space still has, and the FIRST value
    of each one it added (so a parameter added by a tweak should list the parent's behaviour first)."""
    return {name: config.get(name, values[0]) for name, values in space.params.items()}


def seeds_from_runs(rows: Sequence[tuple[int, str, dict[str, Any], int, dict[str, Any], float]], variant_id: int,
                    target: dict[str, Any], space: ConfigSpace, k: int = 5) -> list[Any]:
    """The best passing config at every (shape, M) the rows know, nearest to the target first. Rows are
    (variant id, shape key, shape, M, config, median us) of this variant and its ancestors. The target's own
    results of THIS variant are resumed, not seeds; an ancestor's are the nearest seeds there are."""
    best: dict[tuple[str, int], tuple[float, dict[str, Any], dict[str, Any]]] = {}
    for vid, shape_key, shape, m, config, median in rows:
        if vid == variant_id and shape_key == target["shape_key"] and m in target["ms"]:
            continue
        key = (shape_key, m)
        if key not in best or median < best[key][0]:
            cfg = dict(config) if vid == variant_id else inherit(dict(config), space)
            best[key] = (median, cfg, {**shape["dims"], "M": m})
    known = [(dims, config) for _, config, dims in best.values()]
    goal = {**target["shape"]["dims"], "M": max(target["ms"])}
    return nearest_seeds(known, goal, k=k)


def transfer_seeds(session: Session, search: Search, target: dict[str, Any], space: ConfigSpace,
                   k: int = 5) -> list[Any]:
    """Seeds of a transfer search: the best passing full-fidelity configs of this variant, and of the
    variants it was derived from, on this hardware (seeds_from_runs says which)."""
    rows = session.execute(select(Run.variant_id, Run.shape_key, Run.shape, Run.m, Run.config, Run.median_us)
                           .where(Run.variant_id.in_(lineage(session, search.variant_id)),
                                  Run.hardware == search.hardware, Run.status == "done", Run.verdict == "passed",
                                  Run.fidelity == "full", Run.median_us.is_not(None)))
    return seeds_from_runs([tuple(r) for r in rows], search.variant_id, target, space, k=k)


def build_strategy(session: Session, search: Search, target: dict[str, Any], space: ConfigSpace) -> SearchStrategy:
    options = dict(search.options or {})
    if search.strategy == "transfer":
        options["seeds"] = transfer_seeds(session, search, target, space)
    return make_strategy(search.strategy, space, target_shape(target), budget=budget_of(search), seed=search.seed,
                         **options)


class DbEvaluator:
    """The Evaluator of one target: proposals become runs in the database, on the hardware queue."""

    def __init__(self, factory: sessionmaker[Session], search: Search, target: dict[str, Any], slot: str,
                 enqueue: EnqueueFn, queued_lease_seconds: float, landed: LandedRuns | None = None) -> None:
        self.factory, self.search, self.target, self.slot = factory, search, target, slot
        self.enqueue, self.queued_lease_seconds = enqueue, queued_lease_seconds
        self.landed = landed or LandedRuns(factory)

    def submit(self, proposals: Sequence[Proposal]) -> list[tuple[str, ...]]:
        t_submit = time.time()
        handles: list[tuple[str, ...]] = [()] * len(proposals)
        shape = self.target["shape"]
        with self.factory() as session:
            for fidelity in {p.fidelity for p in proposals}:
                idx = [i for i, p in enumerate(proposals) if p.fidelity == fidelity]
                ids = q.add_proposal_runs(
                    session, self.search, fidelity=fidelity,
                    proposals=[(dict(proposals[i].config), ConfigSpace.canonical(proposals[i].config)) for i in idx],
                    shape=shape, shape_key=self.target["shape_key"], shape_name=shape["name"], ms=self.target["ms"],
                    slot=self.slot, queued_lease_seconds=self.queued_lease_seconds)
                for i, run_ids in zip(idx, ids, strict=True):
                    handles[i] = tuple(sorted(run_ids))
            all_ids = [rid for h in handles for rid in h]
            self.landed.watch(all_ids)
            t_committed = time.time()
            try:
                self.enqueue(all_ids, self.search.queue)
                _trace("submit", search=self.search.id, runs=all_ids, t_submit=t_submit, t_committed=t_committed,
                       t_enqueued=time.time())
            except Exception as exc:  # the runs exist: the sweeper enqueues them once their lease is stale
                log.warning("search %d: enqueue to %s failed (%s); left for the sweeper", self.search.id,
                            self.search.queue, exc)
                runs_q.mark_enqueue_failed(session, all_ids)
        return handles  # type: ignore[return-value]

    def _ready(self, handles: Sequence[tuple[str, ...]]) -> list[bool]:
        return [bool(h) and all(rid in self.landed.finished for rid in h) for h in handles]

    def results(self, handles: Sequence[Any], timeout: float) -> list[Outcome | None]:
        """Outcomes of the proposals whose runs LandedRuns saw finished. The service's loop looks once per
        pass for all targets and calls this with timeout 0; a positive timeout (a lone driver) sleeps it
        and looks when none of these handles has landed."""
        self.landed.watch([rid for h in handles for rid in h])
        ready = self._ready(handles)
        if not any(ready) and timeout > 0:
            self.landed.wait(timeout)
            ready = self._ready(handles)
        out: list[Outcome | None] = [None] * len(handles)
        if any(ready):
            ids = [rid for h, r in zip(handles, ready) if r for rid in h]
            with self.factory() as session:
                runs = {r.id: r for r in q.runs_by_ids(session, ids)}  # only the landed proposals' rows
            for i, h in enumerate(handles):
                rows = [runs[rid] for rid in h if rid in runs]
                if not ready[i] or len(rows) != len(h) or not all(r.status in FINISHED for r in rows):
                    continue
                first = rows[0]
                out[i] = outcome_of(q.ProposalRuns(fidelity=first.fidelity, config=dict(first.config),
                                                   config_key=first.config_key, runs=rows))
                self.landed.take(h)
        if os.environ.get("KT_SEARCH_TRACE"):
            now = time.time()
            for h, o in zip(handles, out):
                if o is not None:
                    _trace("landed", search=self.search.id, runs=list(h), t=now)
        return out


def _resume_target(session: Session, factory: sessionmaker[Session], search: Search, target: dict[str, Any],
                   space: ConfigSpace, slot: str, enqueue: EnqueueFn, settings: Settings,
                   landed: LandedRuns) -> SearchDriver:
    strategy = build_strategy(session, search, target, space)
    proposals = q.target_runs(session, search.id, target["shape_key"], target["ms"])
    done = sorted((p for p in proposals if p.finished), key=lambda p: (p.finished_at or p.created_at, p.config_key))
    finished = [(Proposal(config=p.config, fidelity=p.fidelity), outcome_of(p)) for p in done]  # type: ignore[arg-type]
    in_flight = [(Proposal(config=p.config, fidelity=p.fidelity), p.run_ids)  # type: ignore[arg-type]
                 for p in proposals if not p.finished]
    if finished or in_flight:
        log.info("search %d %s: resuming with %d finished and %d in-flight proposals", search.id, target["label"],
                 len(finished), len(in_flight))
    evaluator = DbEvaluator(factory, search, target, slot, enqueue, settings.queued_lease_seconds, landed)
    # poll_s=0: a target never waits on its own; drive() waits once per pass for all of them.
    return SearchDriver.resume(strategy, evaluator, batch_size=search.batch_size, finished=finished,
                               in_flight=in_flight, poll_s=0.0)


def drive(search_id: int, *, factory: sessionmaker[Session] | None = None, enqueue: EnqueueFn | None = None) -> str:
    """Drive the search to its end (or until it is cancelled or taken over). Returns how it ended."""
    factory = factory or default_session_factory()
    if enqueue is None:
        from workers.dispatch import enqueue_runs as enqueue
    settings = Settings()
    lease, poll_s = lease_seconds(), poll_seconds()
    me = f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"
    with factory() as session:
        search = q.claim_driver(session, search_id, me, lease)
        if search is None:
            return "skipped"
    try:
        landed = LandedRuns(factory, search_id)  # one look per pass for every target's in-flight runs
        with factory() as session:
            variant = session.get(Variant, search.variant_id)
            assert variant is not None
            space = ConfigSpace.parse({**variant.config_space, "constraints": variant.constraints})
            drivers = {t["label"]: _resume_target(session, factory, search, t, space, variant.slot, enqueue,
                                                  settings, landed)
                       for t in search.targets if t["label"] not in (search.stop_reasons or {})}
        renew_every = min(lease / 3, 2.0)
        renewed = time.monotonic()
        while drivers:
            for label, driver in list(drivers.items()):
                driver.collect(0.0)  # tell what the last look found landed, so the step below refills at once
                if not driver.step():  # top the round up (its own collect waits for nothing: poll_s=0)
                    reason = driver.stop_reason or "stopped"
                    with factory() as session:
                        q.set_stop_reason(session, search_id, me, label, reason)
                    log.info("search %d %s: %s after %d evaluations", search_id, label, reason,
                             driver.progress().evaluations)
                    del drivers[label]
            if time.monotonic() - renewed > renew_every:
                with factory() as session:
                    if not q.renew_driver(session, search_id, me, lease):
                        return "released"  # cancelled, or another driver took over after a stall
                renewed = time.monotonic()
            if drivers:
                landed.wait(poll_s)  # one sleep and one query for the whole search, whatever its targets
        with factory() as session:
            q.finish_search(session, search_id, me, "done")
        return "done"
    except OperationalError:
        # The database is unreachable: stop; the lease runs out and the sweeper hands the search to a
        # new driver, which resumes from what was stored.
        log.exception("search %d: database error; leaving it to be resumed", search_id)
        return "interrupted"
    except Exception:
        log.exception("search %d failed", search_id)
        with factory() as session:
            q.finish_search(session, search_id, me, "failed", error=traceback.format_exc()[-4000:])
        return "failed"
