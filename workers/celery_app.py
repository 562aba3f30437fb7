"""The Celery application: one worker per device, one queue per hardware class.

Embedded default: a broker that needs no server (kombu's filesystem transport under the data dir).
Production: Redis (KT_BROKER_URL=redis://...). Results never travel through Celery: the task
writes them to the database, so no result backend is configured.
"""

from __future__ import annotations

from pathlib import Path

from celery import Celery

from service.settings import Settings


def queue_for(hardware: str) -> str:
    return f"kt.{hardware}"


def _broker_options(settings: Settings) -> dict[str, object]:
    if settings.broker_url.startswith("filesystem://"):
        folder = Path(settings.data_dir) / "broker"
        for sub in ("queue", "processed", "control"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        # One folder for in and out: every process on this machine sees the same queue.
        return {"data_folder_in": str(folder / "queue"), "data_folder_out": str(folder / "queue"),
                "store_processed": True, "processed_folder": str(folder / "processed"),
                # broadcast (inspect ping, worker counts) lives here too, not in the current directory
                "control_folder": str(folder / "control"),
                # kombu polls the folder (1 s by default): a listing of a small local folder is cheap, and a
                # run waited up to a second for pickup (the demo's 42 runs, every test on the embedded stack)
                "polling_interval": 0.1}
    # A run unacknowledged this long (its worker died) is delivered again; results are written
    # once per run id, so a redelivery can never duplicate a result.
    return {"visibility_timeout": settings.visibility_timeout_s}


def make_celery(settings: Settings | None = None) -> Celery:
    settings = settings or Settings()
    app = Celery("kerneltune", broker=settings.broker_url, include=["workers.tasks"])
    app.conf.update(
        task_acks_late=True,                  # ack after the result is stored, not on receipt
        task_reject_on_worker_lost=True,      # a SIGKILLed worker's run goes back to the queue
        worker_prefetch_multiplier=1,         # one run at a time per device
        task_ignore_result=True,
        task_default_queue=queue_for("cpu"),
        broker_transport_options=_broker_options(settings),
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        task_serializer="json",
        accept_content=["json"],
    )
    return app


app = make_celery()
