"""Where searches meet the broker: the drive task on the control queue, and the sweeper that hands a
search whose driver died to a new driver (which resumes it from the database).

Kept apart from service/search_runner.py so the API never imports the strategies (optuna).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker

from db.queries import searches as q

log = logging.getLogger("kerneltune.searches")

CONTROL_QUEUE = "kt.control"
DRIVE_TASK = "kt.drive_search"
DEFAULT_BATCH_SIZE = 4

EnqueueSearchFn = Callable[[int], object]


def lease_seconds() -> float:
    """How long a driver's heartbeat (and a drive task's delivery) is trusted; a dead driver's search is
    taken over this long after its last heartbeat. Short in tests (KT_SEARCH_LEASE_SECONDS)."""
    return float(os.environ.get("KT_SEARCH_LEASE_SECONDS") or 30)


def enqueue_drive(search_id: int) -> None:
    from workers.celery_app import app  # lazy: the API starts without the worker stack

    app.send_task(DRIVE_TASK, args=[search_id], queue=CONTROL_QUEUE)


def queue_workers(queue: str, timeout_s: float = 1.0) -> int | None:
    """How many live workers consume ``queue`` (a broadcast; None when the broker has no broadcast,
    e.g. the filesystem transport, or nobody answered)."""
    try:
        from workers.celery_app import app

        answers = app.control.inspect(timeout=timeout_s).active_queues() or {}
    except Exception as exc:  # no broadcast on this transport, or the broker is down
        log.info("cannot count the workers of %s: %s", queue, exc)
        return None
    n = sum(1 for queues in answers.values() if any(qd.get("name") == queue for qd in queues or []))
    return n or None


def sweep_searches_once(factory: sessionmaker[Session], enqueue: EnqueueSearchFn) -> int:
    lease = lease_seconds()
    with factory() as session:
        stale = q.stale_searches(session)
        if not stale:
            return 0
        released = q.release_for_redelivery(session, stale, lease)
    for search_id in released:
        enqueue(search_id)
        log.warning("search %d had no live driver; sent a new drive task (it resumes from the database)", search_id)
    return len(released)


async def sweep_searches_forever(factory: sessionmaker[Session], enqueue: EnqueueSearchFn, interval_s: float) -> None:
    while True:
        await asyncio.sleep(interval_s)
        try:
            await asyncio.to_thread(sweep_searches_once, factory, enqueue)
        except Exception:  # a DB or broker outage: try again next round, never kill the API
            log.exception("search sweep failed; retrying in %.0f s", interval_s)
