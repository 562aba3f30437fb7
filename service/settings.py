"""Service settings from the environment (KT_*). Plain pydantic: no settings framework needed.

``Settings()`` reads the environment for every field not given, so workers, the API and tests
share one definition: ``Settings(database_url=...)`` overrides just that field.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, model_validator

from db.session import default_database_url, normalize_url

_INT_FIELDS = ("max_source_bytes", "max_body_bytes", "max_config_points", "max_runs_per_job",
               "queued_lease_seconds", "run_timeout_s", "visibility_timeout_s", "running_lease_seconds",
               "sweep_interval_s", "auto_bucket_checks_interval_s")


def _from_env(values: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    out = dict(values)
    if "data_dir" not in out:
        out["data_dir"] = Path(env.get("KT_DATA_DIR") or "~/.kerneltune").expanduser()
    if "database_url" not in out:
        out["database_url"] = env.get("KT_DATABASE_URL") or default_database_url(Path(out["data_dir"]))
    if "broker_url" not in out:
        # The embedded default needs no broker server (DESIGN.md, 'Where things run').
        out["broker_url"] = env.get("KT_BROKER_URL") or "filesystem://"
    for name in _INT_FIELDS:
        raw = env.get(f"KT_{name.upper()}")
        if name not in out and raw:
            out[name] = int(raw)
    raw = env.get("KT_AUTH_CACHE_SECONDS")
    if "auth_cache_seconds" not in out and raw:
        out["auth_cache_seconds"] = float(raw)
    raw = env.get("KT_CONTROL_INCUMBENT")
    if "control_incumbent" not in out and raw:
        out["control_incumbent"] = raw.lower() not in ("0", "false", "no")
    raw = env.get("KT_AUTO_BUCKET_CHECKS")
    if "auto_bucket_checks" not in out and raw:
        out["auto_bucket_checks"] = raw.lower() not in ("0", "false", "no")
    raw = env.get("KT_MIGRATE_ON_STARTUP")
    if "migrate_on_startup" not in out and raw:
        out["migrate_on_startup"] = raw.lower() not in ("0", "false", "no")
    return out


class Settings(BaseModel):
    database_url: str
    broker_url: str
    data_dir: Path
    max_source_bytes: int = Field(default=256 * 1024, gt=0)
    max_body_bytes: int = Field(default=2 * 1024 * 1024, gt=0)  # source + space + provenance, with room
    max_config_points: int = Field(default=100_000, gt=0)
    max_runs_per_job: int = Field(default=5000, gt=0)
    # How long a queued run may wait for delivery before the sweeper re-enqueues it.
    queued_lease_seconds: int = Field(default=3600, gt=0)
    run_timeout_s: int = Field(default=300, gt=0)  # one evaluation's wall-clock limit (workers)
    visibility_timeout_s: int = Field(default=3600, gt=0)  # broker redelivery of unacked runs (Redis)
    # A running run's lease, renewed by its worker's heartbeat: a dead worker's run is taken over
    # this long after its last heartbeat (the sweeper re-enqueues it).
    running_lease_seconds: int = Field(default=30, ge=5)
    sweep_interval_s: int = Field(default=10, ge=1)
    migrate_on_startup: bool = True
    # The API plans every winner's bucket checks itself (service/bucket_checks.py, auto_checks_forever) this often:
    # short runs at the M of its bucket that no run checked. Off by default: each new winner costs up to one short run
    # per M of its bucket on the workers (production's compose file turns it on).
    auto_bucket_checks: bool = False
    auto_bucket_checks_interval_s: int = Field(default=60, ge=1)
    # Workers time the bucket's incumbent beside each challenger (workers/bench.py), so that a winner is
    # decided head to head and not by medians from two sessions (db/queries/runs.py ranked_us).
    control_incumbent: bool = True
    # How long the API trusts a token it verified without reading its row again (service/auth.py,
    # PrincipalCache). A revoke through the same API process applies at once; other API processes
    # refuse the revoked secret within this many seconds. 0: read the row on every request.
    auth_cache_seconds: float = Field(default=5.0, ge=0, le=60)

    @model_validator(mode="before")
    @classmethod
    def _fill_from_env(cls, data: Any) -> Any:
        return _from_env(data, os.environ) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _normalise(self) -> "Settings":
        self.database_url = normalize_url(self.database_url)
        return self

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        return cls.model_validate(_from_env({}, os.environ if env is None else env))
