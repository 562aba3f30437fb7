"""Fault injection against the real service (uvicorn API, celery workers, Redis, PostgreSQL; SQLite
for the embedded default). Each test ends by printing what it did and what it counted.

- 30 worker SIGKILLs at random moments over a long job: every run done exactly once (KT_FAULT_KILLS for a longer soak);
- Redis restarted (empty) mid-job: clear 503 from readiness, no 500 on submission, work resumes;
- PostgreSQL restarted mid-job: 503 database_unavailable, then recovery through the worker's retry;
- the API SIGKILLed mid-submission: a retry with the same Idempotency-Key yields exactly one job;
- SQLite held locked by another connection, and SQLite on a full disk: a clear error, nothing half-written.

Seed the random kill moments with KT_FAULT_SEED to replay a run.
"""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from service.embedded import EmbeddedStack
from tests.support.live import GEMM_SOURCE, TINY, LiveService, api_token, auth_headers
from tests.support.servers import free_port

pytestmark = pytest.mark.services

PG_CLUSTER = os.environ.get("KT_TEST_PG_CLUSTER", "15 main").split()
SEED = int(os.environ.get("KT_FAULT_SEED", str(int(time.time()))))
# 30 by default (was 50): the storm was the suite's longest test (3-6 min of a 2-core CI machine); 30 random kills
# still land mid-run across compile, check and bench (30 of 30 in one run here). KT_FAULT_KILLS=200 makes it a soak.
KILLS = int(os.environ.get("KT_FAULT_KILLS", "30"))
# Each replacement worker costs ~5 CPU-s to start (Celery, then its zygote imports torch), so the
# storm's pace is set by CPU: ~3 min on an idle 2-core machine, longer when it is shared.
STORM_BUDGET_S = float(os.environ.get("KT_FAULT_STORM_BUDGET_S", "600"))


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveService]:
    # A short queued lease: a Redis restarted empty has lost its messages, and the sweeper must put
    # those runs back within the test's patience (duplicate messages are harmless: claim refuses them).
    svc = LiveService(tmp_path_factory.mktemp("faults"), workers=1,
                      env_extra={"KT_QUEUED_LEASE_SECONDS": "15"}).start()
    try:
        yield svc
    finally:
        svc.stop()


def _problem(r: httpx.Response) -> dict[str, Any]:
    """A failure answer must be JSON with a useful detail, never a stack trace."""
    body = r.json()
    assert isinstance(body.get("detail"), str) and len(body["detail"]) > 10, body
    assert "Traceback" not in r.text and 'File "' not in r.text, r.text
    return body


def _small_job(live: LiveService, variant_id: int, batch_sizes: list[int], **over: Any) -> int:
    return int(live.submit_job(variant_id, batch_sizes=batch_sizes, shapes=["o_proj"],
                               configs=[{"n_chunks": 1}], **over)["job"]["id"])


def _queued(live: LiveService, job_ids: list[int]) -> int:
    with live.engine() as eng, eng.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM runs WHERE status = 'queued' AND job_id = ANY(:j)"),
                                {"j": job_ids}).scalar_one())


def _assert_exactly_once(live: LiveService, job_ids: list[int]) -> dict[str, Any]:
    report = live.exactly_once_report(job_ids)
    assert not report["lost"] and not report["duplicates"] and not report["unwritten"], report
    assert not report["attempts_mismatch"] and not report["not_passed"], report
    return report


def _wait_some_done(live: LiveService, job_id: int, n: int = 1, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while live.job(job_id)["progress"]["done"] < n:
        assert time.monotonic() < deadline, live.job(job_id)
        time.sleep(0.3)


# --- workers --------------------------------------------------------------------------------------

def test_worker_sigkill_storm(live: LiveService) -> None:
    """KT_FAULT_KILLS (30) SIGKILLs, each of a worker that holds a run, at a random moment after its claim; a fresh
    worker replaces each one, started as its victim is chosen (before the random wait). Two workers run at
    once (three while a replacement starts) so work goes on while a replacement starts."""
    rng = random.Random(SEED)
    started = time.monotonic()
    live.spawn_worker()
    variant_id = live.submit_variant()
    job_ids: list[int] = []
    kills = mid_run = children = 0
    killed_mid_run: list[str] = []
    while kills < KILLS:
        assert time.monotonic() - started < STORM_BUDGET_S, \
            f"storm too slow: {kills} kills in {time.monotonic() - started:.0f} s"
        if _queued(live, job_ids) < 6:  # keep the job long: more runs while kills remain
            job_ids.append(_small_job(live, variant_id, batch_sizes=list(range(1, 9))))
        deadline = time.monotonic() + 60
        held: list[tuple[str, int]] = []
        while not held:
            assert time.monotonic() < deadline, "no worker claimed a run for 60 s"
            held = [(run, int(w.rsplit(":", 1)[1])) for run, w in live.running_workers().items()
                    if w and int(w.rsplit(":", 1)[1]) in live.worker_procs]
            if not held:
                time.sleep(0.05)
        _, pid = rng.choice(held)  # the victim: a worker that holds a run now
        # The victim's replacement starts now rather than after the kill: a worker takes seconds of
        # CPU to start (Celery, then the zygote's torch import), and that startup overlaps the random
        # wait below instead of following it. Each kill still gets exactly one fresh worker.
        live.spawn_worker()
        time.sleep(rng.uniform(0.0, 2.5))  # a random moment: compile, check, bench, or just after
        children += live.kill_worker(pid)
        # Read after the kill (which waits until the database has ended the victim's backends, so a result whose
        # COMMIT was in flight is in): a run still marked as the victim's was cut mid-run (the chosen one, or the
        # next it claimed). Read before, a run that finished in between counted.
        cut = [run for run, w in live.running_workers().items() if w and w.endswith(f":{pid}")]
        if cut:
            mid_run += 1
            killed_mid_run.extend(cut)
        kills += 1
    storm_s = time.monotonic() - started
    live.wait_done(job_ids, timeout_s=240)
    report = _assert_exactly_once(live, job_ids)
    # Every run a worker died holding was evaluated again, and still has exactly one result.
    not_rerun = sorted(set(killed_mid_run) - set(report["rerun"]))
    print(f"\nseed={SEED} kills={kills} mid_run={mid_run} sandbox_children_killed={children} jobs={len(job_ids)} "
          f"runs={report['runs']} rerun={len(report['rerun'])} duplicates={len(report['duplicates'])} "
          f"lost={len(report['lost'])} storm_s={storm_s:.0f} total_s={time.monotonic() - started:.0f}")
    assert not not_rerun, not_rerun
    assert mid_run >= KILLS // 2, f"only {mid_run} of {kills} kills landed mid-run: the storm did not test much"
    for pid in list(live.worker_procs)[:-1]:  # leave one worker for the next tests
        live.kill_worker(pid)


# --- Redis ----------------------------------------------------------------------------------------

def test_redis_restart_mid_job(live: LiveService) -> None:
    assert live.http is not None and live.redis is not None
    variant_id = live.submit_variant()
    job1 = _small_job(live, variant_id, batch_sizes=[1, 2, 3, 4, 5, 6])
    _wait_some_done(live, job1)
    live.redis.stop()  # no persistence: what the queue held is gone, as after a crash
    t0 = time.monotonic()
    r = live.http.get("/v1/ready")
    ready_s = time.monotonic() - t0
    assert r.status_code == 503, r.text
    body = _problem(r)
    assert body["error"] == "not_ready" and "broker" in body["detail"] and body["database"] == "ok", body
    assert live.http.get(f"/v1/jobs/{job1}").status_code == 200  # reads need no broker
    t0 = time.monotonic()
    r = live.http.post("/v1/jobs", json={"variant_id": variant_id, "hardware": "cpu", "configs": [{"n_chunks": 2}],
                                         "deployment": {**TINY, "batch_sizes": [1, 2]}, "shapes": ["o_proj"]})
    submit_s = time.monotonic() - t0
    # The job is accepted durably and says the broker failed; the sweeper enqueues it later.
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["enqueued"] is False and "failed" in created["enqueue_error"], created
    job2 = created["job"]["id"]
    time.sleep(3)  # the worker notices the broker is gone and retries its connection
    live.redis.start()  # same port, empty
    t0 = time.monotonic()
    live.wait_done([job1, job2], timeout_s=180)
    recover_s = time.monotonic() - t0
    report = _assert_exactly_once(live, [job1, job2])
    assert live.http.get("/v1/ready").status_code == 200
    print(f"\nredis_restarts=1 ready_503_s={ready_s:.1f} submit_while_down_s={submit_s:.1f} recovered_s={recover_s:.0f} "
          f"runs={report['runs']} rerun={len(report['rerun'])} duplicates=0 lost=0")


# --- PostgreSQL -----------------------------------------------------------------------------------

def _pg(action: str) -> None:
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", *PG_CLUSTER, action], check=True,
                   capture_output=True, timeout=60)


def _pg_up() -> bool:
    return subprocess.run(["pg_isready", "-h", "127.0.0.1", "-q"], timeout=10).returncode == 0


@pytest.mark.alone  # stops the PostgreSQL server every other test uses: `make test` runs it by itself
def test_postgres_restart_mid_job(live: LiveService) -> None:
    assert live.http is not None
    variant_id = live.submit_variant()
    job = _small_job(live, variant_id, batch_sizes=[1, 2, 3, 4, 5, 6])
    _wait_some_done(live, job)
    answers: dict[str, tuple[int, str]] = {}
    try:
        _pg("stop")
        down_at = time.monotonic()
        r = live.http.get("/v1/ready")
        assert r.status_code == 503 and "database" in _problem(r)["detail"], r.text
        answers["ready"] = (r.status_code, r.json()["error"])
        for name, call in [("get_job", lambda: live.http.get(f"/v1/jobs/{job}")),
                           ("list_runs", lambda: live.http.get(f"/v1/jobs/{job}/runs")),
                           ("submit_job", lambda: live.http.post("/v1/jobs", json={
                               "variant_id": variant_id, "hardware": "cpu", "deployment": {**TINY, "batch_sizes": [1]}})),
                           ("submit_variant", lambda: live.http.post("/v1/variants", json={
                               "slot": "dense_gemm", "language": "torch", "source": GEMM_SOURCE + "# pg down\n",
                               "config_space": {"n_chunks": [1]}, "provenance": {"author": "tests"}}))]:
            r = call()
            assert r.status_code == 503, (name, r.status_code, r.text)
            body = _problem(r)
            assert body["error"] == "database_unavailable" and r.headers.get("retry-after"), body
            answers[name] = (r.status_code, body["error"])
        time.sleep(max(0.0, 6 - (time.monotonic() - down_at)))  # longer than a lease: the worker sees it
    finally:
        if not _pg_up():
            _pg("start")
        deadline = time.monotonic() + 60
        while not _pg_up() and time.monotonic() < deadline:
            time.sleep(0.5)
    outage_s = time.monotonic() - down_at
    assert _pg_up(), "PostgreSQL did not come back"
    t0 = time.monotonic()
    live.wait_done([job], timeout_s=240)
    recover_s = time.monotonic() - t0
    report = _assert_exactly_once(live, [job])
    assert live.http.get("/v1/ready").status_code == 200
    print(f"\npg_restarts=1 outage_s={outage_s:.0f} answers={answers} recovered_s={recover_s:.0f} "
          f"runs={report['runs']} rerun={len(report['rerun'])} duplicates=0 lost=0")


# --- the API --------------------------------------------------------------------------------------

def test_api_killed_mid_submission_idempotent(live: LiveService) -> None:
    """SIGKILL the API at a random moment of a large job submission, restart it, retry with the same
    Idempotency-Key until answered: one job, whole (every planned run), whatever moment the kill hit.
    The jobs target a queue no worker reads (h200), so nothing is evaluated."""
    assert live.http is not None
    rng = random.Random(SEED + 1)
    variant_id = live.submit_variant()
    body = {"variant_id": variant_id, "hardware": "h200", "configs": "all",
            "deployment": {**TINY, "batch_sizes": list(range(1, 17))}}  # 3 configs x 4 shapes x 16 M
    t0 = time.monotonic()
    r = live.http.post("/v1/jobs", json=body, headers={"Idempotency-Key": f"probe-{uuid.uuid4()}"})
    assert r.status_code == 201, r.text
    planned, submit_s = r.json()["runs"], time.monotonic() - t0
    again = live.http.post("/v1/jobs", json=body, headers={"Idempotency-Key": r.request.headers["Idempotency-Key"]})
    assert again.status_code == 200 and again.json()["job"]["id"] == r.json()["job"]["id"], again.text
    other = live.http.post("/v1/jobs", json={**body, "configs": [{"n_chunks": 1}]},
                           headers={"Idempotency-Key": r.request.headers["Idempotency-Key"]})
    assert other.status_code == 422 and _problem(other)["error"] == "idempotency_key_reused", other.text
    outcomes = {"answered_before_kill": 0, "committed_before_kill": 0, "nothing_before_kill": 0}
    attempts = 6
    for i in range(attempts):
        key = f"kill-{i}-{uuid.uuid4()}"
        first: dict[str, Any] = {}

        def submit() -> None:
            try:
                resp = live.http.post("/v1/jobs", json=body, headers={"Idempotency-Key": key}, timeout=30)
                first["status"] = resp.status_code
            except httpx.TransportError as exc:
                first["error"] = type(exc).__name__

        thread = threading.Thread(target=submit)
        thread.start()
        time.sleep(rng.uniform(0.0, submit_s * 1.3))
        live.kill_api()
        thread.join(30)
        committed = _jobs_with_key(live, key)
        if "status" in first:
            outcomes["answered_before_kill"] += 1
        elif committed:
            outcomes["committed_before_kill"] += 1
        else:
            outcomes["nothing_before_kill"] += 1
        live.restart_api()
        r = live.http.post("/v1/jobs", json=body, headers={"Idempotency-Key": key})
        assert r.status_code in (200, 201) and r.json()["runs"] == planned, r.text
        assert r.status_code == (200 if committed else 201), (r.status_code, committed)
        rows = _jobs_with_key(live, key)
        assert rows == [(r.json()["job"]["id"], planned)], rows  # one job, whole
    print(f"\napi_kills={attempts} outcomes={outcomes} planned_runs={planned} submit_s={submit_s:.2f} "
          f"duplicates=0 partial=0")


def _jobs_with_key(live: LiveService, key: str) -> list[tuple[int, int]]:
    with live.engine() as eng, eng.connect() as conn:
        return [(j, n) for j, n in conn.execute(sa.text(
            "SELECT j.id, (SELECT count(*) FROM runs r WHERE r.job_id = j.id) FROM jobs j "
            "WHERE j.idempotency_key LIKE :k"), {"k": f"%:{key}"})]


# --- SQLite (the embedded default) ----------------------------------------------------------------

@pytest.fixture
def sqlite_api(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[EmbeddedStack, httpx.Client, Path]]:
    data_dir: Path = getattr(request, "param", None) or tmp_path / "data"
    # A writer gives up on a held lock after 3 s instead of the default 30 s: the same 503, sooner.
    stack = EmbeddedStack(data_dir=data_dir, port=free_port(), workers=0, log_dir=tmp_path / "logs",
                          env_extra={"KT_SQLITE_BUSY_TIMEOUT_MS": "3000"})
    stack.start(ready_timeout_s=120)
    db = data_dir / "kerneltune.db"
    http = httpx.Client(base_url=stack.url, timeout=90, headers=auth_headers(api_token(data_dir, f"sqlite:///{db}")))
    try:
        yield stack, http, db
    finally:
        http.close()
        stack.stop()


def _variant_body(tag: str, pad: int = 0) -> dict[str, Any]:
    return {"slot": "dense_gemm", "language": "torch", "source": GEMM_SOURCE + f"# {tag}\n" + "#" * pad + "\n",
            "config_space": {"n_chunks": [1, 2]}, "provenance": {"author": "tests", "notes": tag}}


def _count_variants(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT count(*) FROM variants").fetchone()[0])


def _integrity(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


def test_sqlite_locked(sqlite_api: tuple[EmbeddedStack, httpx.Client, Path]) -> None:
    _, http, db = sqlite_api
    assert http.get("/v1/variants").status_code == 200  # the token's first use writes; do it unlocked
    before = _count_variants(db)
    holder = sqlite3.connect(db, timeout=1, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")  # another process's writer that never lets go
        assert http.get("/v1/variants").status_code == 200  # WAL: readers are not blocked
        t0 = time.monotonic()
        r = http.post("/v1/variants", json=_variant_body("locked"))
        waited = time.monotonic() - t0
        assert r.status_code == 503, r.text
        body = _problem(r)
        assert body["error"] == "database_busy" and "locked" in body["detail"] and r.headers.get("retry-after"), body
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert _count_variants(db) == before  # nothing half-written
    r = http.post("/v1/variants", json=_variant_body("locked"))
    assert r.status_code == 201, r.text
    assert _integrity(db) == "ok"
    print(f"\nsqlite_locked=1 status=503 waited_s={waited:.0f} written_while_locked=0 integrity=ok")


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (root only); skips with the reason elsewhere."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}); the disk-full test needs root")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_sqlite_disk_full(tiny_disk: Path, tmp_path: Path) -> None:
    data_dir = tiny_disk / "data"
    stack = EmbeddedStack(data_dir=data_dir, port=free_port(), workers=0, log_dir=tmp_path / "logs")
    stack.start(ready_timeout_s=120)
    db = data_dir / "kerneltune.db"
    try:
        http = httpx.Client(base_url=stack.url, timeout=90,
                            headers=auth_headers(api_token(data_dir, f"sqlite:///{db}")))
        assert http.get("/v1/variants").status_code == 200
        filler = tiny_disk / "filler"
        # Unbuffered: a buffered file keeps the bytes of its failed write and raises ENOSPC again
        # when the with-block closes it (seen in CI: the test failed in its own set-up).
        with open(filler, "wb", buffering=0) as f:  # take every free block
            try:
                while True:
                    f.write(b"\0" * 65536)
            except OSError:
                pass
        before = _count_variants(db)
        created = 0
        refused: httpx.Response | None = None
        for i in range(8):  # WAL pages already allocated may take a write or two before the disk says no
            r = http.post("/v1/variants", json=_variant_body(f"full-{i}", pad=200_000))
            if r.status_code == 201:
                created += 1
                continue
            refused = r
            break
        assert refused is not None, "the full disk never refused a write"
        assert refused.status_code == 507, refused.text
        body = _problem(refused)
        assert body["error"] == "storage_full" and "disk is full" in body["detail"], body
        assert _count_variants(db) == before + created  # every answer matches what is stored: no half-writes
        filler.unlink()
        r = http.post("/v1/variants", json=_variant_body("after-full", pad=200_000))
        assert r.status_code == 201, r.text
        assert _integrity(db) == "ok"
        http.close()
        print(f"\nsqlite_disk_full=1 accepted_before_refusal={created} status={refused.status_code} "
              f"half_written=0 integrity=ok")
    finally:
        stack.stop()
