"""bench/service_tuning.py on the CPU, through the real embedded stack (API, Celery workers, SQLite, filesystem
broker): a plan's job item and search item both reach the winners table, and --resume-db starts a second
session from the first one's DB, so its search seeds from the first's results and the table keeps both --
also when the shipped file was edited in between: the new version is a child of the old one, and a transfer
search on a child seeds from its parent's runs (checked: without the lineage the first proposal differs)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.servers import free_port

REPO = Path(__file__).resolve().parents[1]
MOE = "kernels/variants/torch/moe_experts_gather_bmm.py"


def tune(tmp_path: Path, name: str, plan: dict, *extra: str) -> dict:
    # The budget is a deadline, not a speed target: the plan ends when its jobs and searches do (about 45 s here
    # alone); a CI machine busy with the other tests once took more than 240 s and cancelled the search.
    (tmp_path / f"{name}.json").write_text(json.dumps(plan))
    out = subprocess.run([sys.executable, "bench/service_tuning.py", "--plan", str(tmp_path / f"{name}.json"),
                          "--hardware", "cpu", "--device", "cpu", "--what", name, "--workers", "2", "--budget-s", "600",
                          "--data-dir", str(tmp_path / f"data-{name}"), "--out", str(tmp_path / "out"),
                          "--port", str(free_port()), *extra],
                         cwd=REPO, env={**os.environ, "KT_LOG_FORMAT": "plain"}, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    [doc] = [json.loads(p.read_text()) for p in (tmp_path / "out").glob(f"*-cpu-{name}.json")]
    return doc


@pytest.mark.timeout(1500)  # two plans, each with tune()'s deadline
def test_plan_searches_and_resumes_from_an_earlier_db(tmp_path: Path) -> None:
    deployment = {"spec": "tiny-moe", "tp": 1, "batch_sizes": [1, 4]}
    moe = tmp_path / "moe_experts_gather_bmm.py"  # a shipped file, edited between the two sessions
    moe.write_text((REPO / MOE).read_text())
    first = tune(tmp_path, "first", {"deployment": deployment, "variants": [
        # an item the service refuses (a config without one of the file's params) is recorded; the rest still runs
        {"file": str(moe), "slot": "moe_experts", "language": "torch", "batch_sizes": [1],
         "configs": [{"intermediate": "fp32"}]},
        {"file": str(moe), "slot": "moe_experts", "language": "torch", "batch_sizes": [1],
         "configs": [{"intermediate": "fp32", "token_chunk": 0}]}]})
    refused, done = first["jobs"]
    assert "token_chunk" in refused["refused"] and "state" not in refused and done["state"] == "done"
    assert set(first["summary"]["moe_experts/moe_experts"]["buckets"]) == {"1"}

    moe.write_text(moe.read_text() + "\n# edited: a new version of the file\n")
    second = tune(tmp_path, "second", {"deployment": deployment, "variants": [
        {"file": str(moe), "slot": "moe_experts", "language": "torch", "batch_sizes": [4],
         "search": {"strategy": "transfer", "budget": {"max_evals": 2}, "batch_size": 1}}]},
        "--resume-db", str(next((tmp_path / "out").glob("*-cpu-first.sqlite"))), "--bucket-checks-s", "300")
    [job] = second["jobs"]
    parent_id = done["variant_id"]
    assert job["variant_id"] != parent_id  # the edited source is a new variant...
    db = next((tmp_path / "out").glob("*-cpu-second.sqlite"))
    with sqlite3.connect(db) as conn:
        assert conn.execute("select parent_id from variants where id = ?", (job["variant_id"],)).fetchone() == \
            (parent_id,)  # ...derived from the file's earlier version
        rows = conn.execute("select job_id, m, config_key from runs order by created_at").fetchall()
    [target] = job["search"]["targets"]
    assert job["search"]["state"] == "done" and target["label"].endswith("M=4") and target["evaluations"] == 2
    # transfer: the first proposal is the config the parent ran at M=1 in the first session
    assert [(m, json.loads(c)) for j, m, c in rows if j == job["job_id"]][0] == \
        (4, {"intermediate": "fp32", "token_chunk": 0})
    # the resumed DB keeps the first session's run, and the table has both buckets
    assert any(j == done["job_id"] and m == 1 for j, m, _ in rows)
    assert set(second["summary"]["moe_experts/moe_experts"]["buckets"]) == {"1", "3-4"}
    # the bucket checks: a tuned 3-4 winner (measured at M = 4) checked at M = 3 by a short run, which passed (the
    # same kernel) and did not take the bucket; a stock 3-4 winner needs none
    checks = second["bucket_checks"]
    tuned_34 = second["summary"]["moe_experts/moe_experts"]["buckets"]["3-4"]["winner"] != "stock"
    with sqlite3.connect(db) as conn:
        short = conn.execute("select m, verdict, status from runs join jobs on jobs.id = runs.job_id"
                             " where jobs.kind = 'bucket_check'").fetchall()
    assert checks["entries"] == checks["runs"] == len(short) == int(tuned_34)
    assert short == ([(3, "passed", "done")] if tuned_34 else []) and checks["by_verdict"] == ({"passed": 1} if tuned_34 else {})
    if tuned_34:
        assert second["summary"]["moe_experts/moe_experts"]["buckets"]["3-4"]["m"] == 4
    # each results file names the shipped file of every variant in its DB (the winners of a resumed DB
    # include earlier sessions' variants, which its own jobs do not list)
    assert first["variant_files"] == {str(parent_id): str(moe)}
    assert second["variant_files"] == {str(parent_id): str(moe), str(job["variant_id"]): str(moe)}


def test_variant_files_are_read_from_the_shipped_notes() -> None:
    sys.path.insert(0, str(REPO / "bench"))
    import service_tuning

    variants = [{"id": 3, "notes": "shipped variant kernels/variants/triton/router_fused.py"},
                {"id": 9, "notes": "an agent's variant"}]
    assert service_tuning.shipped_variant_files(variants) == {"3": "kernels/variants/triton/router_fused.py"}


@pytest.mark.timeout(300)
def test_a_cancel_at_the_deadline_waits_for_the_runs_in_flight(tmp_path: Path) -> None:
    """bench/service_tuning.py cancels what is pending at its deadline; a running run is not cancelled (it
    finishes), so settle() waits for it before the DB is copied: the results then hold its verdict, not `running`.
    Real embedded stack; the run is a torch GEMM whose build sleeps, so it is in flight when the cancel comes."""
    from service.client import Client
    from service.embedded import EmbeddedStack

    sys.path.insert(0, str(REPO / "bench"))
    import service_tuning

    source = (REPO / "kernels/variants/torch/dense_gemm_matmul.py").read_text() + (
        "\n\nimport time\n_plain_build = build\n\n\ndef build(config, shape):\n"
        "    time.sleep(8)  # long enough to be cancelled while running\n    return _plain_build(config, shape)\n")
    data_dir = tmp_path / "data"
    stack = EmbeddedStack(data_dir, port=free_port(), hardware="cpu", workers=1)
    stack.start()
    try:
        client = Client(stack.url, token=service_tuning.token_for(data_dir))
        variant = client.post("/v1/variants", {"slot": "dense_gemm", "language": "torch", "source": source,
                                               "config_space": {"n_chunks": [1]}, "provenance": {"author": "tests"}})
        created = client.post("/v1/jobs", {"variant_id": variant["id"], "hardware": "cpu", "configs": "all",
                                           "deployment": {"spec": "tiny-moe", "tp": 1, "batch_sizes": [1]}})
        jobs = [{"job_id": created["job"]["id"]}]
        t0 = time.monotonic()
        while client.get(f"/v1/jobs/{jobs[0]['job_id']}")["progress"]["running"] == 0:
            assert time.monotonic() - t0 < 180, "no run was claimed"
            time.sleep(0.2)
        client.post(f"/v1/jobs/{jobs[0]['job_id']}/cancel")
        assert service_tuning.settle(client, jobs, grace_s=0) >= 1  # in flight: a cancel leaves it running
        assert service_tuning.settle(client, jobs, grace_s=120) == 0
        progress = client.get(f"/v1/jobs/{jobs[0]['job_id']}")["progress"]
        assert progress["running"] == 0 and progress["done"] >= 1 and progress["by_verdict"].get("passed", 0) >= 1
    finally:
        stack.stop()
