"""Celery tasks: thin. Claim the run in the DB, evaluate it in the sandbox, store the verdict.

A task only carries a run id. Everything else (variant source, config, shape, M) is read from
the database, so a redelivered message after a worker death does the same work, and the
write-once result makes the second delivery a no-op.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from pathlib import Path

from sqlalchemy.exc import OperationalError

from db.models import Run
from db.queries import runs as run_queries
from db.queries.winners import incumbent_run
from db.session import session_scope
from celery.signals import worker_ready

from service.logging_setup import configure_json_logging, log_context
from workers.celery_app import app
from workers import replay_device
from workers.protocol import BenchSettings, ControlSpec, RunSpec
from workers.sandbox import evaluate

log = logging.getLogger("kerneltune.worker")


def worker_device() -> str:
    """cpu, cuda, cuda:N, or replay:<landscape path> (workers/replay_device.py: no GPU, no sandbox)."""
    return os.environ.get("KT_DEVICE", "cpu")


# A short timing (successive halving's first rung): a third of the rounds and a tenth of the time.
SHORT_BENCH = BenchSettings(min_rounds=3, min_time_s=0.02, bootstrap=500)


def bench_for(fidelity: str) -> BenchSettings:
    return SHORT_BENCH if fidelity == "short" else BenchSettings()


def _spec_for(run: Run, timeout_s: float, incumbent: Run | None = None) -> RunSpec:
    variant = run.variant
    control = None
    if incumbent is not None:
        iv = incumbent.variant
        control = ControlSpec(run_id=incumbent.id, language=iv.language, source=iv.source, source_hash=iv.content_hash,
                              config=incumbent.config, declares_library=bool(iv.declares_library))
    return RunSpec(
        run_id=run.id, slot=variant.slot, language=variant.language, source=variant.source,
        source_hash=variant.content_hash, config=run.config, shape=run.shape, m=run.m,
        device=worker_device(), seed=run.seed, timeout_s=timeout_s,
        declares_library=bool(variant.declares_library), bench=bench_for(run.fidelity), control=control,
    )


@worker_ready.connect
def _on_worker_ready(**_: object) -> None:
    """JSON logs, and the sandbox's zygote started before the first run arrives (it imports torch)."""
    from service.settings import Settings
    from workers.sandbox import warm_zygote

    if os.environ.get("KT_LOG_FORMAT", "json") == "json":
        configure_json_logging()
    device = worker_device()
    if not device.startswith("replay:"):
        warm_zygote(Path(Settings().data_dir), device)


class LeaseHeartbeat(threading.Thread):
    """Renews the run's lease while it is evaluated: if this worker dies, the lease runs out and
    the sweeper hands the run to another worker."""

    def __init__(self, run_id: str, worker: str, lease_seconds: float):
        super().__init__(daemon=True, name=f"lease-{run_id[:8]}")
        self.run_id, self.worker, self.lease_seconds = run_id, worker, lease_seconds
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.lease_seconds / 3):
            try:
                with session_scope() as session:
                    run_queries.renew_lease(session, self.run_id, self.worker, self.lease_seconds)
            except OperationalError:
                log.warning("could not renew the lease of run %s; retrying", self.run_id)

    def __enter__(self) -> "LeaseHeartbeat":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self.join(timeout=5)


@app.task(name="kt.evaluate_run", bind=True, acks_late=True, max_retries=20,
          autoretry_for=(OperationalError,), retry_backoff=True, retry_backoff_max=60)
def evaluate_run(self, run_id: str) -> str:
    from service.settings import Settings  # read per task: tests change the environment

    settings = Settings()
    worker = f"{socket.gethostname()}:{os.getpid()}"
    device = worker_device()
    with session_scope() as session:
        run = run_queries.claim_run(session, run_id, worker=worker, lease_seconds=settings.running_lease_seconds)
        if run is None:  # already done, cancelled, or leased by a live worker
            return "skipped"
        job_id = run.job_id
        if replay_device.is_replay(device):
            request = replay_device.ReplayRequest(run_id=run.id, config=dict(run.config), shape=dict(run.shape),
                                                  m=run.m, seed=run.seed, fidelity=run.fidelity)
        else:
            # The bucket's incumbent is read at claim time, so the run is timed against today's winner; a short
            # timing (a search's first rung) can never win, so it is not worth the incumbent's build.
            control = settings.control_incumbent and run.fidelity == "full"
            incumbent = incumbent_run(session, run) if control else None
            spec = _spec_for(run, settings.run_timeout_s, incumbent)
    with log_context(run_id=run_id, job_id=job_id), LeaseHeartbeat(run_id, worker, settings.running_lease_seconds):
        if replay_device.is_replay(device):
            result = replay_device.answer(device, request)
        else:
            log.info("evaluating run %s (%s M=%d) on %s", run_id, spec.shape.get("name"), spec.m, spec.device)
            result = evaluate(spec, data_dir=Path(settings.data_dir))
    with session_scope() as session:
        wrote = run_queries.record_result(session, run_id, result.model_dump(mode="json"))
    return result.verdict if wrote else "duplicate"


@app.task(name="kt.drive_search", acks_late=False, ignore_result=True)
def drive_search(search_id: int) -> str:
    """Drive a config search to its end on the control queue (kt.control). Acked on receipt: a driver
    that dies is replaced by the API's search sweeper once its lease in the database runs out, and the
    new driver resumes from the runs the database holds."""
    from service.search_runner import drive  # the strategies (optuna) load only where searches are driven

    return drive(search_id)
