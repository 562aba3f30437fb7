"""Where runs are put on the queue of their hardware (the API and the sweeper call this)."""

from __future__ import annotations

from workers.celery_app import app, queue_for

EVALUATE_TASK = "kt.evaluate_run"


def enqueue_runs(run_ids: list[str], queue: str) -> None:
    """One Celery message per run; the run id is the whole payload (the DB holds the rest)."""
    with app.producer_or_acquire() as producer:
        for run_id in run_ids:
            app.send_task(EVALUATE_TASK, args=[run_id], queue=queue, producer=producer)


def enqueue_for_hardware(run_ids: list[str], hardware: str) -> None:
    enqueue_runs(run_ids, queue_for(hardware))


def broker_ping(timeout_s: float = 2.0) -> None:
    """Raise if the broker cannot be reached within ``timeout_s`` (readiness probe)."""
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=timeout_s)
