"""The sweeper: puts runs back on the queue when the broker lost them or their worker died.

Runs carry leases (queued: time to delivery, running: renewed by the worker's heartbeat). A run
whose lease expired is re-enqueued; a duplicate delivery is harmless because claim_run refuses a
live lease and results are written once per run id.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict

from sqlalchemy.orm import Session, sessionmaker

from db.queries import runs as run_queries
from service.deps import EnqueueFn

log = logging.getLogger("kerneltune.sweeper")


def sweep_once(factory: sessionmaker[Session], enqueue: EnqueueFn, queued_lease_seconds: float) -> int:
    with factory() as session:
        stale = run_queries.stale_runs(session)
        if not stale:
            return 0
        by_queue: dict[str, list[str]] = defaultdict(list)
        for run in stale:
            by_queue[f"kt.{run.hardware}"].append(run.id)
        run_queries.release_expired(session, [r.id for r in stale if r.status == "running"])
        for queue, ids in by_queue.items():
            enqueue(ids, queue)
            run_queries.mark_enqueued(session, ids, queued_lease_seconds)
            log.warning("re-enqueued %d stale runs on %s", len(ids), queue)
        return len(stale)


async def sweep_forever(factory: sessionmaker[Session], enqueue: EnqueueFn, interval_s: float,
                        queued_lease_seconds: float) -> None:
    while True:
        await asyncio.sleep(interval_s)
        try:
            await asyncio.to_thread(sweep_once, factory, enqueue, queued_lease_seconds)
        except Exception:  # a DB or broker outage: try again next round, never kill the API
            log.exception("sweep failed; retrying in %.0f s", interval_s)
