"""Searches through the whole service: HTTP API -> driver task on kt.control -> Redis -> real Celery
workers answering from the replay device -> PostgreSQL, and back. Timings come from a synthetic
landscape (a roofline model, not measurements).

One stack for the module: a private redis-server, a fresh PostgreSQL database, the API, a control
worker and three replay workers (KT_REPLAY_DELAY_S makes each run take a while, so rounds overlap).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from db.models import Run
from db.session import make_engine, make_session_factory
from search.landscape import Landscape, synthetic_gemm_landscape
from service.client import Client
from service.embedded import EmbeddedStack
from tests.support.intervals import peak_overlap
from tests.support.servers import RedisServer, free_port, fresh_pg_database

REPO = Path(__file__).resolve().parents[1]
SPACE = {"BLOCK_N": [32, 64, 128, 256], "BLOCK_K": [64, 128, 256], "SPLIT_K": {"pow2": [1, 8]},
         "num_warps": [4, 8], "num_stages": {"range": [2, 4]},
         "constraints": ["BLOCK_K * SPLIT_K <= K", "BLOCK_N <= N"]}
DIMS = {"N": 2112, "K": 7168}  # fused_qkv_a of the Kimi-K2-like spec at TP8
M = 16
WORKERS = 3
DEPLOYMENT = {"spec": "kimi-k2-like", "tp": 8, "batch_sizes": [M]}


@pytest.fixture(scope="module")
def landscape(tmp_path_factory: pytest.TempPathFactory) -> tuple[Landscape, Path]:
    land = synthetic_gemm_landscape(SPACE, DIMS, [M], seed=1)
    return land, land.save(tmp_path_factory.mktemp("landscape") / "synthetic-fused_qkv_a.json")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, landscape: tuple[Landscape, Path]) -> Iterator[EmbeddedStack]:
    root = tmp_path_factory.mktemp("search-stack")
    redis = RedisServer(root / "redis").start()
    pg_url, drop = fresh_pg_database()
    s = EmbeddedStack(root / "data", port=free_port(), hardware="replay", workers=WORKERS, env_extra={
        "KT_DATABASE_URL": pg_url, "KT_BROKER_URL": redis.url, "KT_DEVICE": f"replay:{landscape[1]}",
        "KT_REPLAY_DELAY_S": "0.25", "KT_REPLAY_LOG": str(root / "replay.log"),
        # Short leases so the kill test's takeovers happen in seconds, not the production half-minute.
        "KT_SEARCH_LEASE_SECONDS": "4", "KT_SWEEP_INTERVAL_S": "1", "KT_RUNNING_LEASE_SECONDS": "5",
        # A worker SIGKILLed after its run's message arrived but before it claimed the run leaves the run
        # queued and the message unacked: it comes back after the queued lease (re-enqueued by the
        # sweeper) or the broker's visibility timeout, an hour each by default.
        "KT_QUEUED_LEASE_SECONDS": "20", "KT_VISIBILITY_TIMEOUT_S": "30",
        "KT_SEARCH_POLL_S": "0.05", "KT_LOG_FORMAT": "plain"})
    try:
        s.start()
        yield s
    finally:
        s.stop()
        redis.stop()
        drop()


@pytest.fixture(scope="module")
def db(stack: EmbeddedStack) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(stack.env["KT_DATABASE_URL"])
    yield make_session_factory(engine)
    engine.dispose()


@pytest.fixture(scope="module")
def variant_id(stack: EmbeddedStack) -> int:
    source = (REPO / "kernels" / "variants" / "torch" / "dense_gemm_matmul.py").read_text()
    out = stack.client().post("/v1/variants", {"slot": "dense_gemm", "language": "torch", "source": source,
                                               "config_space": SPACE, "provenance": {"author": "pytest"}})
    return int(out["id"])


def start_search(client: Client, variant_id: int, **body: Any) -> dict[str, Any]:
    return client.post("/v1/searches", {"variant_id": variant_id, "deployment": DEPLOYMENT, "hardware": "replay",
                                        "shapes": ["fused_qkv_a"], "batch_size": WORKERS, **body})


def wait_for(client: Client, search_id: int, until: Any, timeout_s: float = 150.0,
             stack: EmbeddedStack | None = None) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        out = client.get(f"/v1/searches/{search_id}")
        if until(out):
            return out
        if time.monotonic() >= deadline:
            pytest.fail(f"search {search_id} stuck: {json.dumps(out)[:2000]}" + (stuck_report(stack, search_id)
                                                                                 if stack else ""))
        time.sleep(0.3)


def stuck_report(stack: EmbeddedStack, search_id: int) -> str:
    """What a stuck search's runs and processes were doing, for the failure message."""
    engine = make_engine(stack.env["KT_DATABASE_URL"])
    try:
        with make_session_factory(engine)() as s:
            runs = [r for r in s.scalars(select(Run).where(Run.search_id == search_id)) if r.status != "done"]
            lines = [f"{r.id} {r.status} worker={r.worker} attempts={r.attempts} lease={r.lease_expires_at}"
                     for r in runs]
    finally:
        engine.dispose()
    logs = sorted((stack.log_dir or stack.data_dir / "logs").glob("*.log"))
    tails = [f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:]) for p in logs]
    return "\nruns not done:\n" + "\n".join(lines) + "\n" + "\n".join(tails)


def search_runs(db: sessionmaker[Session], search_id: int) -> list[Run]:
    with db() as s:
        return list(s.scalars(select(Run).where(Run.search_id == search_id).order_by(Run.created_at)))


def replay_log(stack: EmbeddedStack) -> list[dict[str, Any]]:
    path = Path(stack.env["KT_REPLAY_LOG"])
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_tpe_search_finds_the_best_in_part_of_the_space(stack: EmbeddedStack, db: sessionmaker[Session],
                                                        variant_id: int, landscape: tuple[Landscape, Path]) -> None:
    land, _ = landscape
    client = stack.client()
    budget = 80
    created = start_search(client, variant_id, strategy="tpe", budget={"max_evals": budget}, seed=0)
    assert created["state"] == "queued" and created["batch_size"] == WORKERS and created["enqueue_error"] is None
    (target,) = created["targets"]
    assert target["valid_points"] == land.space().count(land.shape_for([M])) == 288

    t0 = time.monotonic()
    out = wait_for(client, created["id"], lambda o: o["state"] in ("done", "failed", "cancelled"))
    wall = time.monotonic() - t0
    assert out["state"] == "done", out.get("error")
    (target,) = out["targets"]
    assert target["evaluations"] == budget < target["valid_points"]
    assert target["stop_reason"] == f"max_evals={budget} reached" and target["in_flight"] == 0

    # Found the exhaustive best within 3% (judged on the landscape's noise-free value of the config).
    best_config, best_us = land.exhaustive_best([M])
    found = target["best"]
    assert land.objective(found["config"], [M]) <= 1.03 * best_us, (found, best_config, best_us)
    assert found["speedup"] > 1.0 and len(found["run_ids"]) == 1
    history = [h["best_us"] for h in target["history"] if h["best_us"] is not None]
    assert history == sorted(history, reverse=True) and len(target["history"]) == budget

    runs = search_runs(db, created["id"])
    assert len(runs) == budget and all(r.status == "done" and r.fidelity == "full" for r in runs)
    assert max(Counter(r.config_key for r in runs).values()) == 1  # no config evaluated twice
    assert {r.fingerprint_id for r in runs} == {runs[0].fingerprint_id} and runs[0].fingerprint_id.startswith("replay-")
    # batch_size proposals in flight at once from the driver's side (created -> result), never more;
    # and the workers really ran them side by side.
    assert peak_overlap([(r.created_at, r.finished_at) for r in runs]) == WORKERS
    assert peak_overlap([(r.started_at, r.finished_at) for r in runs]) >= WORKERS - 1
    assert len({r.worker for r in runs}) == WORKERS
    print(f"tpe search: {budget} evaluations in {wall:.1f} s")


def _kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def test_search_resumes_after_the_api_driver_and_a_worker_are_killed(
        stack: EmbeddedStack, db: sessionmaker[Session], variant_id: int) -> None:
    client = stack.client()
    budget = 60
    created = start_search(client, variant_id, strategy="tpe", budget={"max_evals": budget}, seed=7)
    sid = created["id"]
    before = wait_for(client, sid, lambda o: o["evaluations"] >= 20, stack=stack)
    first_driver = before["driver"]

    # Kill the driver (control worker), one device worker mid-run, and the API: SIGKILL, no cleanup.
    api, *workers = [p for p in stack.procs if p.poll() is None]
    control = workers.pop()  # start() spawns the control worker last
    for proc in (control, workers[0], api):
        _kill(proc)
        stack.procs.remove(proc)
    done_at_kill = {r.id: (r.finished_at, r.config_key) for r in search_runs(db, sid) if r.status == "done"}
    assert 20 <= len(done_at_kill) < budget

    # Restart everything that was killed; nobody tells the search anything.
    stack.start_api()
    Client(stack.url).wait_ready(60)
    stack.start_worker(WORKERS)
    stack.start_control_worker()

    out = wait_for(client, sid, lambda o: o["state"] in ("done", "failed", "cancelled"), stack=stack)
    assert out["state"] == "done", out.get("error")
    assert out["driver"] != first_driver  # a new driver took the search over from the database
    (target,) = out["targets"]
    assert target["evaluations"] == budget and target["stop_reason"] == f"max_evals={budget} reached"

    runs = search_runs(db, sid)
    assert len(runs) == budget and all(r.status == "done" for r in runs)
    assert max(Counter(r.config_key for r in runs).values()) == 1
    for r in runs:  # results stored before the kill are untouched
        if r.id in done_at_kill:
            assert (r.finished_at, r.config_key) == done_at_kill[r.id]
    # The device side: no run that had finished before the kill was evaluated again.
    evaluated = Counter(e["run_id"] for e in replay_log(stack))
    assert all(evaluated[run_id] == 1 for run_id in done_at_kill), \
        {k: v for k, v in evaluated.items() if k in done_at_kill and v != 1}
    assert all(evaluated[r.id] >= 1 for r in runs)


def test_list_and_cancel(stack: EmbeddedStack, db: sessionmaker[Session], variant_id: int) -> None:
    client = stack.client()
    created = start_search(client, variant_id, strategy="random", budget={"max_cost_s": 10_000}, seed=3)
    wait_for(client, created["id"], lambda o: o["evaluations"] >= 3)
    out = client.post(f"/v1/searches/{created['id']}/cancel")
    assert out["search"]["state"] == "cancelled"
    assert created["id"] in [s["id"] for s in client.get("/v1/searches", state="cancelled")]
    time.sleep(2.0)  # the driver notices at its next heartbeat and proposes nothing more
    n = len(search_runs(db, created["id"]))
    time.sleep(2.0)
    runs = search_runs(db, created["id"])
    assert len(runs) == n and all(r.status in ("done", "cancelled") for r in runs)
    assert out["search"]["targets"][0]["evaluations"] < 288


def test_cli_search_sends_strategy_options(stack: EmbeddedStack, variant_id: int) -> None:
    """`kerneltune search ... --option KEY=VALUE`: the options reach the search (typed), an unknown one is
    refused by the API with its name, a malformed pair by the CLI."""
    import re

    from typer.testing import CliRunner

    from service.cli import app as cli

    env = {"KT_API_URL": stack.url, "KT_TOKEN": stack.admin_token}
    base = ["search", str(variant_id), "--hardware", "replay", "--batches", str(M), "--shapes", "fused_qkv_a",
            "--strategy", "tpe", "--max-evals", "8", "--batch-size", str(WORKERS), "--no-wait"]
    out = CliRunner().invoke(cli, [*base, "--option", "local_per_round=2", "-o", "n_startup_trials=4"], env=env)
    assert out.exit_code == 0, out.output
    sid = int(re.search(r"search (\d+):", out.output).group(1))
    done = wait_for(stack.client(), sid, lambda o: o["state"] in ("done", "failed", "cancelled"), stack=stack)
    assert done["state"] == "done" and done["options"] == {"local_per_round": 2, "n_startup_trials": 4}
    assert done["targets"][0]["evaluations"] == 8
    # `kerneltune winners` names the M each winner's bucket serves that no run checked (the search timed M = 16 only)
    tuned = [w for w in stack.client().get("/v1/winners", slot="dense_gemm", hardware="replay") if not w["is_stock"]]
    assert tuned and all(w["evidence"]["unchecked_ms"] == list(range(9, 16)) for w in tuned
                         if w["batch_bucket"] == "9-16"), tuned
    table = CliRunner().invoke(cli, ["winners", "--slot", "dense_gemm", "--hardware", "replay"],
                               env={**env, "COLUMNS": "300"})
    assert table.exit_code == 0 and "unchecked M" in table.output and "9-15" in table.output, table.output
    assert "kerneltune bucket-checks" in table.output

    unknown = CliRunner().invoke(cli, [*base, "--option", "local_steps=2"], env=env)
    assert unknown.exit_code == 1 and "local_steps" in unknown.output, unknown.output
    malformed = CliRunner().invoke(cli, [*base, "--option", "local_per_round"], env=env)
    assert malformed.exit_code == 2 and "KEY=VALUE" in malformed.output, malformed.output
