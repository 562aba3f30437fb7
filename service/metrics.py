"""GET /metrics: Prometheus text exposition, read from the database at scrape time.

Workers are separate processes (and hosts), so counting in-process would see only the API's share:
the runs table is the one place every worker writes, and the collector reads it. The stage-latency
histogram is accumulated incrementally (only runs finished since the last scrape are read), so it
behaves like a real Prometheus histogram: monotonic while the API lives, reset on restart.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric)
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from db.models import Run, Winner, utcnow
from db.queries.winners import checked_ms
from kernels.deployment import unchecked_in

STAGES = ("compile", "check", "bench")
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, float("inf"))
WORKER_WINDOW = timedelta(days=1)  # workers not seen for a day drop out of the heartbeat gauge
_OVERLAP = timedelta(minutes=2)  # re-read this far behind the watermark: workers' clocks and commits lag


class StageHistogram:
    """Cumulative per-stage latency buckets over finished runs, fed in order of finished_at."""

    def __init__(self) -> None:
        self.counts = {s: [0] * len(BUCKETS) for s in STAGES}
        self.sums = {s: 0.0 for s in STAGES}
        self.watermark: datetime | None = None
        self.recent: dict[str, datetime] = {}  # run ids already counted inside the overlap window
        self.lock = threading.Lock()

    def observe(self, stage: str, seconds: float) -> None:
        for i, le in enumerate(BUCKETS):
            if seconds <= le:
                self.counts[stage][i] += 1
        self.sums[stage] += seconds

    def update(self, session: Session, batch: int = 5000) -> None:
        with self.lock:
            while True:
                q = (select(Run.id, Run.finished_at, Run.compile, Run.check, Run.bench)
                     .where(Run.status == "done", Run.finished_at.is_not(None))
                     .order_by(Run.finished_at, Run.id).limit(batch))
                if self.watermark is not None:
                    q = q.where(Run.finished_at >= self.watermark - _OVERLAP)
                rows = [r for r in session.execute(q) if r.id not in self.recent]
                for run_id, finished_at, *stages in rows:
                    for stage, data in zip(STAGES, stages):
                        secs = data.get("seconds") if isinstance(data, dict) else None
                        if isinstance(secs, (int, float)) and not isinstance(secs, bool) and secs > 0:
                            self.observe(stage, float(secs))
                    self.recent[run_id] = finished_at
                    if self.watermark is None or finished_at > self.watermark:
                        self.watermark = finished_at
                if self.watermark is not None:
                    floor = self.watermark - _OVERLAP
                    self.recent = {k: v for k, v in self.recent.items() if v >= floor}
                if len(rows) < batch:
                    return

    def family(self) -> HistogramMetricFamily:
        fam = HistogramMetricFamily("kerneltune_evaluation_stage_seconds",
                                    "Seconds per evaluation stage of finished runs (child-side timings)",
                                    labels=["stage"])
        with self.lock:
            for stage in STAGES:
                buckets = [("+Inf" if le == float("inf") else repr(le), n) for le, n in zip(BUCKETS, self.counts[stage])]
                fam.add_metric([stage], buckets, self.sums[stage])
        return fam


class DatabaseCollector(Collector):
    def __init__(self, factory: sessionmaker[Session], running_lease_seconds: float) -> None:
        self.factory = factory
        self.lease = timedelta(seconds=running_lease_seconds)
        self.stages = StageHistogram()

    def collect(self) -> Iterable[Metric]:
        with self.factory() as session:
            yield from self._queues(session)
            yield from self._verdicts(session)
            yield from self._gpu_seconds(session)
            yield from self._workers(session)
            yield from self._winners(session)
            self.stages.update(session)
        yield self.stages.family()

    def _queues(self, session: Session) -> Iterator[Metric]:
        depth = GaugeMetricFamily("kerneltune_queue_depth", "Runs waiting per hardware queue (status queued)",
                                  labels=["hardware", "queue"])
        running = GaugeMetricFamily("kerneltune_runs_running", "Runs being evaluated per hardware queue",
                                    labels=["hardware", "queue"])
        q = select(Run.hardware, Run.status, func.count()).where(Run.status.in_(("queued", "running"))) \
            .group_by(Run.hardware, Run.status)
        for hardware, status, n in session.execute(q):
            (depth if status == "queued" else running).add_metric([hardware, f"kt.{hardware}"], n)
        yield depth
        yield running

    def _verdicts(self, session: Session) -> Iterator[Metric]:
        fam = CounterMetricFamily("kerneltune_runs_finished", "Finished runs by verdict and hardware",
                                  labels=["verdict", "hardware"])
        q = select(Run.verdict, Run.hardware, func.count()).where(Run.status == "done") \
            .group_by(Run.verdict, Run.hardware)
        for verdict, hardware, n in session.execute(q):
            fam.add_metric([verdict or "none", hardware], n)
        yield fam

    def _gpu_seconds(self, session: Session) -> Iterator[Metric]:
        fam = CounterMetricFamily("kerneltune_gpu_seconds", "Child wall seconds spent evaluating runs",
                                  labels=["hardware"])
        q = select(Run.hardware, func.coalesce(func.sum(Run.wall_s), 0.0)).where(Run.status == "done") \
            .group_by(Run.hardware)
        for hardware, secs in session.execute(q):
            fam.add_metric([hardware], float(secs))
        yield fam

    def _workers(self, session: Session) -> Iterator[Metric]:
        """A running run's lease is renewed by its worker's heartbeat: lease expiry minus the lease length
        is that worker's last heartbeat. Finished runs count as seen at finished_at."""
        seen: dict[str, datetime] = {}
        busy: dict[str, int] = {}
        since = utcnow() - WORKER_WINDOW
        running = select(Run.worker, func.max(Run.lease_expires_at), func.count()) \
            .where(Run.status == "running", Run.worker.is_not(None)).group_by(Run.worker)
        for worker, lease, n in session.execute(running):
            busy[worker] = n
            if lease is not None:
                seen[worker] = max(seen.get(worker, lease - self.lease), lease - self.lease)
        done = select(Run.worker, func.max(Run.finished_at)) \
            .where(Run.status == "done", Run.worker.is_not(None), Run.finished_at >= since).group_by(Run.worker)
        for worker, finished in session.execute(done):
            if finished is not None:
                seen[worker] = max(seen.get(worker, finished), finished)
        last = GaugeMetricFamily("kerneltune_worker_last_seen_timestamp_seconds",
                                 "Last heartbeat (lease renewal) or result of each worker, Unix time",
                                 labels=["worker"])
        runs = GaugeMetricFamily("kerneltune_worker_running_runs", "Runs each worker holds a lease on",
                                 labels=["worker"])
        for worker in sorted(seen):
            last.add_metric([worker], seen[worker].timestamp())
            runs.add_metric([worker], busy.get(worker, 0))
        yield last
        yield runs


    def _winners(self, session: Session) -> Iterator[Metric]:
        """Winners by how far their evidence reaches: stock kept, tuned and checked at every M of the bucket, or tuned
        with batch sizes of the bucket that no run checked (and how many such M: what bucket checks have left)."""
        winners = list(session.scalars(select(Winner)))
        checked = checked_ms(session, winners)
        counts: dict[tuple[str, str], int] = {}
        open_ms: dict[str, int] = {}
        for w in winners:
            missing = [] if w.is_stock else unchecked_in(w.batch_bucket, checked.get(w.id, []))
            state = "stock" if w.is_stock else ("unchecked" if missing else "checked")
            counts[w.hardware, state] = counts.get((w.hardware, state), 0) + 1
            open_ms[w.hardware] = open_ms.get(w.hardware, 0) + len(missing)
        fam = GaugeMetricFamily("kerneltune_winners", "Winners per hardware: stock, tuned and checked at every batch "
                                "size of the bucket (checked), or tuned with batch sizes no run checked (unchecked)",
                                labels=["hardware", "state"])
        for (hardware, state), n in sorted(counts.items()):
            fam.add_metric([hardware, state], n)
        yield fam
        gap = GaugeMetricFamily("kerneltune_winner_unchecked_batch_sizes",
                                "Batch sizes that tuned winners serve and no run checked (bucket checks left)",
                                labels=["hardware"])
        for hardware, n in sorted(open_ms.items()):
            gap.add_metric([hardware], n)
        yield gap


def make_registry(factory: sessionmaker[Session], running_lease_seconds: float) -> CollectorRegistry:
    """A registry per app: tests build many apps in one process, and the global registry would mix them."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(factory, running_lease_seconds))
    return registry


router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response, summary="Prometheus metrics (text exposition)")
def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.metrics_registry), media_type=CONTENT_TYPE_LATEST)
