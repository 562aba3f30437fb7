"""Shared fixtures.

Database fixtures run every DB/API test twice: on a fresh SQLite file and on a real PostgreSQL
(KT_TEST_PG_URL, default postgresql+psycopg://postgres@127.0.0.1:5432/postgres), in a uniquely named
database created for this test session and dropped after. No PostgreSQL -> those tests fail with
the reason, unless KT_ALLOW_NO_PG=1 (then they skip).
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from db.migrate import upgrade
from db.session import make_engine, make_session_factory, normalize_url
from support.interpreted import interpreted_results

DEFAULT_TEST_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


@pytest.fixture(scope="module")
def interpreted(request: pytest.FixtureRequest) -> dict[str, str]:
    """The requesting module's CASES under Triton's interpreter: the module run as a script in a child
    (support.interpreted), once per module; case name -> "ok" or the traceback."""
    return interpreted_results(request.module.__file__)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A worker data dir shared by a module's sandboxed runs: the CPU bandwidth (seconds to measure) is
    measured once per module, then read from the dir's cache. A module that needs more in it overrides this."""
    return tmp_path_factory.mktemp("kt-data")


# --- databases ----------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def pg_database_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session."""
    base = normalize_url(os.environ.get("KT_TEST_PG_URL") or DEFAULT_TEST_PG_URL)
    admin = make_engine(base, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with admin.connect() as conn:
            conn.execute(text("SELECT 1"))
    except OperationalError as exc:
        admin.dispose()
        msg = (f"PostgreSQL is not reachable at {make_url(base).render_as_string(hide_password=True)}: {exc.orig}. "
               "Start it or point KT_TEST_PG_URL at one; KT_ALLOW_NO_PG=1 skips the PostgreSQL tests.")
        if os.environ.get("KT_ALLOW_NO_PG") == "1":
            pytest.skip(msg)
        pytest.fail(msg, pytrace=False)
    name = f"kt_test_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database (no tables) on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'kerneltune.db'}"
    url: str = request.getfixturevalue("pg_database_url")
    eng = make_engine(url, poolclass=NullPool)
    with eng.begin() as conn:  # each test starts from nothing, like a fresh deployment
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    eng.dispose()
    return url


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """A migrated database (alembic upgrade head)."""
    eng = make_engine(db_url)
    upgrade(engine=eng)
    yield eng
    eng.dispose()


@pytest.fixture
def session_factory(engine: Engine) -> sessionmaker[Session]:
    return make_session_factory(engine)


@pytest.fixture
def session(session_factory: sessionmaker[Session]) -> Iterator[Session]:
    with session_factory() as s:
        yield s


# --- API ----------------------------------------------------------------------------------------

class EnqueueRecorder:
    """Stands in for workers.dispatch.enqueue_runs through create_app's hook: records what was sent."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], str]] = []
        self.fail_with: Exception | None = None

    def __call__(self, run_ids: list[str], queue: str) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.calls.append((list(run_ids), queue))


@pytest.fixture
def enqueue_recorder() -> EnqueueRecorder:
    return EnqueueRecorder()


@pytest.fixture
def client(db_url: str, tmp_path: Path, enqueue_recorder: EnqueueRecorder) -> Iterator[TestClient]:
    from service.app import create_app
    from service.settings import Settings

    settings = Settings(database_url=db_url, broker_url="memory://", data_dir=tmp_path)
    app = create_app(settings, enqueue_runs=enqueue_recorder, broker_ping=lambda: None)
    with TestClient(app) as c:  # the context runs the lifespan: migrations to head
        # Every request carries an admin token made straight in the DB; test_auth checks the others.
        c.headers["Authorization"] = f"Bearer {token_in_db(app.state.session_factory, 'test-admin', ['admin'])}"
        yield c


def token_in_db(factory: sessionmaker[Session], name: str, scopes: list[str], **quota: Any) -> str:
    """Create an API token directly in the database; returns its secret."""
    from db.queries.tokens import create_token

    with factory() as s:
        return create_token(s, name=name, scopes=scopes, **quota)[1]


@pytest.fixture
def make_token(client: TestClient) -> Callable[..., str]:
    """make_token(["read"], name=None, gpu_seconds_per_day=None, max_concurrent_jobs=None) -> secret."""
    names = itertools.count()

    def make(scopes: list[str], name: str | None = None, **quota: Any) -> str:
        return token_in_db(client.app.state.session_factory, name or f"token{next(names)}", scopes, **quota)  # type: ignore[attr-defined]
    return make


# --- results as the harness reports them (workers/protocol.py RunResult, as a dict) ----------------

@pytest.fixture
def run_result() -> Callable[..., dict[str, Any]]:
    def make(run_id: str, verdict: str = "passed", median_us: float = 10.0, baseline_us: float = 20.0,
             ci: tuple[float, float] = (1.5, 2.5), hardware_class: str = "cpu",
             hardware_key: str = "cpu-test-0", uses_library: bool = False,
             wall_s: float = 1.0) -> dict[str, Any]:
        passed = verdict == "passed"
        return {
            "run_id": run_id, "verdict": verdict,
            "reason_code": None if passed else verdict, "reason": None if passed else f"test: {verdict}",
            "compile": {"ok": verdict != "compile_failed", "seconds": 0.2, "cache_hit": False, "log": "", "line": None},
            "check": {"passed": passed, "trials": [{"seed": 11, "rel_l2": 2e-3, "max_abs_err": 1e-2},
                                                   {"seed": 12, "rel_l2": 3e-3, "max_abs_err": 2e-2}],
                      "mismatches": []},
            "bench": ({"timer": "cpu", "median_us": median_us, "p10_us": median_us * 0.95,
                       "p90_us": median_us * 1.05, "cv": 0.02, "n": 100, "baseline_median_us": baseline_us,
                       "baseline_p10_us": baseline_us * 0.95, "baseline_p90_us": baseline_us * 1.05,
                       "baseline_cv": 0.02, "speedup": baseline_us / median_us, "speedup_ci_lo": ci[0],
                       "speedup_ci_hi": ci[1], "floor_us": median_us / 4, "frac_of_floor": 0.25,
                       "bytes_moved": 1 << 20, "bandwidth_gbs": 100.0} if passed else None),
            "fingerprint": {"hardware_key": hardware_key, "hardware_class": hardware_class, "name": "test device",
                            "bandwidth_gbs": 100.0},
            "uses_library": uses_library, "child_wall_s": wall_s,
        }
    return make


# --- order --------------------------------------------------------------------------------------

# The longest files first: `make test` spreads files over processes (pytest-xdist --dist loadfile
# --no-loadscope-reorder) in collection order, and a long file handed out last would run alone at the
# end (xdist's default reorder, by test count, would send the few-test, 5-minute fault file near the
# end). Within a file the order is unchanged (stable sort).
# Refreshed from `--durations=0` sums per file (2026-12-05).
LONG_FILES = ("test_faults.py", "test_dense_gemm_gemv.py", "test_service_tuning.py", "test_search_service.py",
              "test_moe_experts_gemv.py", "test_agents.py", "test_tp.py", "test_sandbox_lock_wait.py",
              "test_fuzz_api.py", "test_shared_expert_gemv.py", "test_oproj_residual_norm_gemv.py", "test_export.py",
              "test_sandbox_security.py", "test_moe_block.py", "test_dashboard.py", "test_winners_incremental.py", "test_backends.py",
              "test_e2e_service.py", "test_input_digest.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))
