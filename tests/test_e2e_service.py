"""The whole service, end to end: real uvicorn API, real Redis broker, real PostgreSQL, real
`celery worker` evaluating runs in sandboxed children. Then a worker SIGKILLed mid-job: the job
still completes with every run done exactly once (checked from the database's audit trail).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.live import LiveService

pytestmark = pytest.mark.services


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveService]:
    svc = LiveService(tmp_path).start()
    try:
        yield svc
    finally:
        svc.stop()


def test_submit_evaluate_rank_then_survive_worker_kill(live: LiveService) -> None:
    assert live.http is not None and live.stack is not None
    ready = live.http.get("/v1/ready").json()
    assert ready["database"] == "ok" and ready["broker"] == "ok", ready
    variant_id = live.submit_variant()

    # 1. The shipped torch dense_gemm variant on a small deployment: every run passes with numbers.
    first = live.submit_job(variant_id, batch_sizes=[1, 4, 16], shapes=["q_b_proj", "o_proj"],
                            configs=[{"n_chunks": 1}])
    assert first["runs"] == 6  # 2 shapes x 3 batch sizes x 1 config
    job_id = first["job"]["id"]
    live.wait_done([job_id], timeout_s=180)
    runs = live.http.get(f"/v1/jobs/{job_id}/runs").json()
    assert len(runs) == 6 and {r["shape_name"] for r in runs} == {"q_b_proj", "o_proj"}
    assert {r["m"] for r in runs} == {1, 4, 16}
    for r in runs:
        assert r["verdict"] == "passed", r
        detail = live.http.get(f"/v1/runs/{r['id']}").json()
        bench = detail["bench"]
        assert bench["median_us"] > 0 and bench["baseline_median_us"] > 0 and bench["speedup"] > 0, detail
        assert detail["check"]["passed"] and detail["compile"]["ok"], detail
    board = live.http.get("/v1/leaderboard", params={"slot": "dense_gemm", "hardware": "cpu"}).json()
    assert board and all(g["entries"] for g in board), board
    assert {e["run_id"] for g in board for e in g["entries"]} <= {r["id"] for r in runs}, board
    winners = live.http.get("/v1/winners", params={"slot": "dense_gemm", "hardware": "cpu"}).json()
    assert winners and {w["shape_name"] for w in winners} == {"q_b_proj", "o_proj"}, winners

    # 2. A longer job; SIGKILL the worker (its whole tree) while it holds a run, start a new one.
    second = live.submit_job(variant_id, batch_sizes=[1, 2, 4, 16], shapes=["q_b_proj", "o_proj"],
                             configs=[{"n_chunks": 2}])
    job2 = second["job"]["id"]
    [worker] = live.worker_procs.values()
    deadline = time.monotonic() + 120
    held: dict[str, str] = {}
    while time.monotonic() < deadline and not held:
        held = live.running_workers()
        time.sleep(0.1)
    assert held, "the worker never claimed a run of the second job"
    [(killed_run, holder)] = held.items()
    assert holder.endswith(f":{worker.pid}"), (holder, worker.pid)
    time.sleep(0.5)  # inside the evaluation, not at the claim
    orphans = live.kill_worker(worker.pid)
    progress_at_kill = live.job(job2)["progress"]
    killed_mid_run = live.http.get(f"/v1/runs/{killed_run}").json()["status"] == "running"
    live.spawn_worker()
    live.wait_done([job2], timeout_s=240)

    report = live.exactly_once_report([job_id, job2])
    print(f"kills=1 runs={report['runs']} rerun={len(report['rerun'])} duplicates={len(report['duplicates'])} "
          f"lost={len(report['lost'])} killed_children={orphans} progress_at_kill={progress_at_kill}")
    assert report["runs"] == 14
    assert not report["lost"] and not report["duplicates"] and not report["unwritten"], report
    assert not report["attempts_mismatch"] and not report["not_passed"], report
    # A run the dead worker held unfinished is evaluated again by the new worker (after the sweeper
    # or the broker's redelivery), and still has one result.
    if killed_mid_run:
        assert killed_run in report["rerun"], report
