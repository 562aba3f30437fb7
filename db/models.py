"""ORM models (DESIGN.md 'Words'): variants, jobs, runs, device fingerprints, winners.

Job state and progress are not stored: they are derived from the job's runs, so a worker writing
a result can never leave a job counter out of step. Runs carry the numbers used for ranking as
plain columns (median, speedup, CI) next to the full compile/check/bench JSON they come from.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (JSON, Boolean, CheckConstraint, DateTime, Float, ForeignKey, Index, Integer,
                        MetaData, String, Text, TypeDecorator, UniqueConstraint, text)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

# Deterministic constraint names: the migration spells the same names, and Alembic can compare them.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

RUN_STATUSES = ("queued", "running", "done", "cancelled")
FIDELITIES = ("full", "short")
SEARCH_STATES = ("queued", "running", "done", "cancelled", "failed")
VERDICTS = ("passed", "compiled", "compile_failed", "check_failed", "rejected", "crashed", "timeout", "error")
# Verdicts that say nothing against correctness: every other verdict blocks a winner.
NON_FAILING_VERDICTS = ("passed", "compiled")
# A done run whose verdict blocks a winner: the partial index ix_runs_failed_config covers these rows.
FAILED_RUNS_PREDICATE = ("status = 'done' AND verdict NOT IN ("
                         + ", ".join(f"'{v}'" for v in NON_FAILING_VERDICTS) + ")")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in and out. SQLite has no time zones: store naive UTC there, re-attach UTC
    on the way out, so lease comparisons and API timestamps mean the same on both backends."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the database; use db.models.utcnow()")
        value = value.astimezone(timezone.utc)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Variant(Base):
    __tablename__ = "variants"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # sha256 over (slot, language, source): the same source submitted twice is the same variant.
    content_hash: Mapped[str] = mapped_column(String(64), unique=True)
    slot: Mapped[str] = mapped_column(String(64), index=True)
    language: Mapped[str] = mapped_column(String(16))
    source: Mapped[str] = mapped_column(Text)
    config_space: Mapped[dict[str, Any]] = mapped_column(JSON)
    constraints: Mapped[list[str]] = mapped_column(JSON)
    # Points satisfying the constraints; the raw size when constraints read shape dims (known per job).
    n_points: Mapped[int] = mapped_column(Integer)
    declares_library: Mapped[bool] = mapped_column(Boolean, default=False)  # USES_LIBRARY: ranked as such
    author: Mapped[str] = mapped_column(String(128), index=True)
    agent: Mapped[str | None] = mapped_column(String(128))
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("variants.id", ondelete="SET NULL"))
    notes: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    parent: Mapped[Variant | None] = relationship(remote_side=[id])


class ApiToken(Base):
    """An API credential of a user or agent. Only the sha256 of the secret is stored: the secret is
    shown once at creation, and a leaked database cannot be replayed against the API."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))  # first characters of the secret: tells tokens apart in lists
    scopes: Mapped[list[str]] = mapped_column(JSON)
    gpu_seconds_per_day: Mapped[float | None] = mapped_column(Float)  # None: no limit
    max_concurrent_jobs: Mapped[int | None] = mapped_column(Integer)  # None: no limit
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Job(Base):
    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    variant_id: Mapped[int] = mapped_column(ForeignKey("variants.id"), index=True)
    kind: Mapped[str] = mapped_column(String(16), default="eval")
    deployment: Mapped[dict[str, Any]] = mapped_column(JSON)
    model_name: Mapped[str] = mapped_column(String(128), index=True)
    hardware: Mapped[str] = mapped_column(String(32))
    queue: Mapped[str] = mapped_column(String(48))
    configs: Mapped[Any] = mapped_column(JSON)  # "all" or the explicit list as requested
    shape_filter: Mapped[list[str] | None] = mapped_column(JSON)
    # The only stored state: everything else about progress is counted from the runs.
    cancelled: Mapped[bool] = mapped_column(Boolean, default=False)
    cancelled_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    submitted_by: Mapped[str | None] = mapped_column(String(128))  # the submitting token's name
    # The token that submitted the job: quotas are counted and private jobs are hidden by it.
    token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id"), index=True)
    private: Mapped[bool] = mapped_column(Boolean, default=False)
    # "<token id>:<Idempotency-Key header>": stored in the job's own transaction, so a retried
    # submission finds the job whole or finds nothing (and creates it).
    idempotency_key: Mapped[str | None] = mapped_column(String(200), unique=True, index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    variant: Mapped[Variant] = relationship()


class DeviceFingerprint(Base):
    __tablename__ = "device_fingerprints"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)  # the harness' hardware_key
    hardware_class: Mapped[str] = mapped_column(String(32))
    fields: Mapped[dict[str, Any]] = mapped_column(JSON)
    bandwidth_gbs: Mapped[float | None] = mapped_column(Float)
    first_seen_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        # One run per point of a job's fan-out: a retried job creation cannot duplicate runs.
        UniqueConstraint("job_id", "config_key", "shape_key", "m"),
        CheckConstraint(f"status IN {RUN_STATUSES!r}", name="status"),
        Index("ix_runs_job_status", "job_id", "status"),
        Index("ix_runs_bucket", "slot", "shape_key", "batch_bucket", "hardware", "status"),
        Index("ix_runs_lease", "status", "lease_expires_at"),
        # a (variant, config)'s runs in a bucket: export's evidence (export/collect.py); migration 0005
        Index("ix_runs_config_bucket", "variant_id", "config_key", "shape_key", "batch_bucket", "hardware"),
        # The winner's "did this config fail anywhere in the bucket" probe (db/queries/winners.py): a
        # point lookup into the failed runs only (migration 0006). The predicate is spelled as the query
        # spells it (winners.failing_run), or the planner cannot use the index.
        Index("ix_runs_failed_config", "variant_id", "config_key", "shape_key", "batch_bucket", "hardware",
              postgresql_where=text(FAILED_RUNS_PREDICATE), sqlite_where=text(FAILED_RUNS_PREDICATE)),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    variant_id: Mapped[int] = mapped_column(ForeignKey("variants.id"), index=True)
    slot: Mapped[str] = mapped_column(String(64))  # denormalised from the variant for ranking queries
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    config_key: Mapped[str] = mapped_column(Text)  # canonical JSON of config
    shape: Mapped[dict[str, Any]] = mapped_column(JSON)  # Shape.to_json()
    shape_key: Mapped[str] = mapped_column(String(256))
    shape_name: Mapped[str] = mapped_column(String(64))
    m: Mapped[int] = mapped_column(Integer)
    batch_bucket: Mapped[str] = mapped_column(String(16))
    hardware: Mapped[str] = mapped_column(String(32))
    seed: Mapped[int] = mapped_column(Integer)  # base seed of the run's fresh random inputs
    status: Mapped[str] = mapped_column(String(16), default="queued")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker: Mapped[str | None] = mapped_column(String(255))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    verdict: Mapped[str | None] = mapped_column(String(32))
    reason_code: Mapped[str | None] = mapped_column(String(64))
    reason: Mapped[str | None] = mapped_column(Text)
    compile: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    check: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    bench: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    median_us: Mapped[float | None] = mapped_column(Float)
    baseline_median_us: Mapped[float | None] = mapped_column(Float)
    speedup: Mapped[float | None] = mapped_column(Float)
    speedup_ci_lo: Mapped[float | None] = mapped_column(Float)
    speedup_ci_hi: Mapped[float | None] = mapped_column(Float)
    frac_of_floor: Mapped[float | None] = mapped_column(Float)
    # The bucket's incumbent timed beside this run in the same child (workers/bench.py): its winning run,
    # its median here, and the ratio control / this run with its CI. No foreign key: evidence, kept even if
    # that run goes (migration 0007).
    control_run_id: Mapped[str | None] = mapped_column(String(36))
    control_median_us: Mapped[float | None] = mapped_column(Float)
    vs_control: Mapped[float | None] = mapped_column(Float)
    vs_control_ci_lo: Mapped[float | None] = mapped_column(Float)
    vs_control_ci_hi: Mapped[float | None] = mapped_column(Float)
    # What winners rank by: the median in the incumbent's time base (median x the control run's ranked_us /
    # the control's median here), or the median itself where no control ran (db/queries/runs.py).
    ranked_us: Mapped[float | None] = mapped_column(Float)
    uses_library: Mapped[bool | None] = mapped_column(Boolean)
    wall_s: Mapped[float | None] = mapped_column(Float)  # the child's wall seconds: the GPU-seconds quota
    fingerprint_id: Mapped[str | None] = mapped_column(ForeignKey("device_fingerprints.id"))
    # Set on the runs a search proposed: what a restarted driver reads back to resume.
    search_id: Mapped[int | None] = mapped_column(ForeignKey("searches.id"), index=True)  # searches are never deleted
    # "full": the evaluation protocol's bench; "short": a cheap first timing (successive halving). Short
    # timings rank configs inside a search only: they never become winners.
    fidelity: Mapped[str] = mapped_column(String(8), default="full", server_default="full")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    job: Mapped[Job] = relationship()
    variant: Mapped[Variant] = relationship()
    fingerprint: Mapped[DeviceFingerprint | None] = relationship()


class Winner(Base):
    __tablename__ = "winners"
    __table_args__ = (UniqueConstraint("slot", "shape_key", "batch_bucket", "hardware"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    slot: Mapped[str] = mapped_column(String(64))
    shape_key: Mapped[str] = mapped_column(String(256))
    shape_name: Mapped[str] = mapped_column(String(64))
    batch_bucket: Mapped[str] = mapped_column(String(16))
    hardware: Mapped[str] = mapped_column(String(32))
    # NULL with is_stock: nothing beat the stock kernel beyond noise, and the table says so.
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    is_stock: Mapped[bool] = mapped_column(Boolean, default=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    run: Mapped[Run | None] = relationship()


class Search(Base):
    """A config search: a strategy proposes configs of one variant, one sub-search per target (a shape
    at one M, or a shape over one batch bucket). The proposals are the search's runs (``Run.search_id``,
    in ``job_id``'s job, short timings in ``short_job_id``'s): the database holds everything a restarted
    driver needs, and progress is counted from those runs. Only the driver's lease and the stop reasons
    are stored here."""

    __tablename__ = "searches"
    __table_args__ = (CheckConstraint(f"state IN {SEARCH_STATES!r}", name="state"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    variant_id: Mapped[int] = mapped_column(ForeignKey("variants.id"), index=True)
    # Full-fidelity runs; short ones go to a second job so (config, shape, M) stays unique per job.
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"))
    short_job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id"))
    hardware: Mapped[str] = mapped_column(String(32))
    queue: Mapped[str] = mapped_column(String(48))
    deployment: Mapped[dict[str, Any]] = mapped_column(JSON)
    model_name: Mapped[str] = mapped_column(String(128))
    shape_filter: Mapped[list[str] | None] = mapped_column(JSON)
    strategy: Mapped[str] = mapped_column(String(32))
    options: Mapped[dict[str, Any]] = mapped_column(JSON)  # strategy constructor options (eta, rung_size, ...)
    budget: Mapped[dict[str, Any]] = mapped_column(JSON)  # per target: max_evals, max_gpu_seconds, patience
    batch_size: Mapped[int] = mapped_column(Integer)
    per: Mapped[str] = mapped_column(String(8))  # "m" or "bucket"
    seed: Mapped[int] = mapped_column(Integer)
    targets: Mapped[list[dict[str, Any]]] = mapped_column(JSON)  # [{label, shape (Shape.to_json()), ms}]
    state: Mapped[str] = mapped_column(String(16), default="queued")
    stop_reasons: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)  # target label -> why it stopped
    error: Mapped[str | None] = mapped_column(Text)
    # The driver holding the search and until when; an expired lease is taken over (resume).
    driver: Mapped[str | None] = mapped_column(String(255))
    driver_lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    submitted_by: Mapped[str | None] = mapped_column(String(128))
    token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id"), index=True)
    private: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    variant: Mapped[Variant] = relationship()


class ExportRecord(Base):
    """One row per wheel built by export/ (export.record.record_export writes it)."""

    __tablename__ = "exports"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    hardware: Mapped[str] = mapped_column(String(32), index=True)
    model: Mapped[str] = mapped_column(String(128), index=True)
    version: Mapped[str] = mapped_column(String(64))
    wheel_filename: Mapped[str] = mapped_column(String(255))
    sha256: Mapped[str] = mapped_column(String(64))
    entries: Mapped[int] = mapped_column(Integer)
    partial: Mapped[bool] = mapped_column(Boolean, default=False)
    skipped: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
