"""GET /metrics: Prometheus text that parses, with the families computed from the runs table."""

from __future__ import annotations

import io
import json
import logging
from typing import Any, Callable

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from db.models import utcnow
from db.queries.runs import claim_run, record_result
from service.logging_setup import configure_json_logging, log_context

DEPLOY = {"spec": "tiny-moe", "tp": 1, "batch_sizes": [1, 3, 4]}


def scrape(client: TestClient) -> dict[str, Any]:
    r = client.get("/metrics", headers={"Authorization": ""})  # public: Prometheus scrapes without a token
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {f.name: f for f in text_string_to_metric_families(r.text)}


def samples(fam: Any, name: str, **labels: str) -> list[float]:
    return [s.value for s in fam.samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def test_metrics_from_the_database(client: TestClient, run_result: Callable[..., dict[str, Any]]) -> None:
    v = client.post("/v1/variants", json={"slot": "dense_gemm", "language": "torch",
                                          "source": "def build(config, shape):\n    pass\n",
                                          "config_space": {"BLOCK": [64]}, "provenance": {"author": "a"}}).json()
    job = client.post("/v1/jobs", json={"variant_id": v["id"], "deployment": DEPLOY, "shapes": ["o_proj"]}).json()
    assert job["runs"] == 3
    job2 = client.post("/v1/jobs", json={"variant_id": v["id"], "deployment": DEPLOY, "hardware": "h200",
                                         "shapes": ["o_proj", "lm_head"]}).json()
    runs = [r["id"] for r in client.get(f"/v1/jobs/{job['job']['id']}/runs").json()]
    fams = scrape(client)
    assert {"kerneltune_queue_depth", "kerneltune_runs_running", "kerneltune_runs_finished", "kerneltune_gpu_seconds",
            "kerneltune_evaluation_stage_seconds", "kerneltune_worker_last_seen_timestamp_seconds"} <= set(fams)
    assert samples(fams["kerneltune_queue_depth"], "kerneltune_queue_depth", hardware="cpu") == [3]
    assert samples(fams["kerneltune_queue_depth"], "kerneltune_queue_depth", hardware="h200") == [job2["runs"]] == [6]
    assert samples(fams["kerneltune_evaluation_stage_seconds"], "kerneltune_evaluation_stage_seconds_count",
                   stage="compile") == [0]

    with client.app.state.session_factory() as s:  # type: ignore[attr-defined]
        claim_run(s, runs[0], "w1@host", 30)
        record_result(s, runs[0], run_result(runs[0], wall_s=2.0))
        claim_run(s, runs[1], "w1@host", 30)
        record_result(s, runs[1], run_result(runs[1], verdict="check_failed", wall_s=0.5))
        before = utcnow()
        claim_run(s, runs[2], "w2@host", 30)  # running, lease renewed by its heartbeat
    fams = scrape(client)
    assert samples(fams["kerneltune_queue_depth"], "kerneltune_queue_depth", hardware="cpu") == []  # none queued
    assert samples(fams["kerneltune_runs_running"], "kerneltune_runs_running", hardware="cpu") == [1]
    verdicts = fams["kerneltune_runs_finished"]
    assert samples(verdicts, "kerneltune_runs_finished_total", verdict="passed", hardware="cpu") == [1]
    assert samples(verdicts, "kerneltune_runs_finished_total", verdict="check_failed", hardware="cpu") == [1]
    assert samples(fams["kerneltune_gpu_seconds"], "kerneltune_gpu_seconds_total", hardware="cpu") == [2.5]
    stage = fams["kerneltune_evaluation_stage_seconds"]
    # the fixture's compile stage took 0.2 s: in the 0.25 bucket and above, not in 0.1
    assert samples(stage, "kerneltune_evaluation_stage_seconds_count", stage="compile") == [2]
    assert samples(stage, "kerneltune_evaluation_stage_seconds_bucket", stage="compile", le="0.1") == [0]
    assert samples(stage, "kerneltune_evaluation_stage_seconds_bucket", stage="compile", le="0.25") == [2]
    assert abs(samples(stage, "kerneltune_evaluation_stage_seconds_sum", stage="compile")[0] - 0.4) < 1e-9
    seen = fams["kerneltune_worker_last_seen_timestamp_seconds"]
    [w2] = samples(seen, "kerneltune_worker_last_seen_timestamp_seconds", worker="w2@host")
    assert abs(w2 - before.timestamp()) < 5
    assert samples(fams["kerneltune_worker_running_runs"], "kerneltune_worker_running_runs", worker="w2@host") == [1]
    assert samples(seen, "kerneltune_worker_last_seen_timestamp_seconds", worker="w1@host")
    # o_proj's bucket 1: the M = 1 pass, checked at its only M; 3-4: its config failed at M = 3, stock kept
    winners = fams["kerneltune_winners"]
    assert samples(winners, "kerneltune_winners", hardware="cpu", state="checked") == [1]
    assert samples(winners, "kerneltune_winners", hardware="cpu", state="stock") == [1]
    assert samples(winners, "kerneltune_winners", hardware="cpu", state="unchecked") == []
    assert samples(fams["kerneltune_winner_unchecked_batch_sizes"], "kerneltune_winner_unchecked_batch_sizes",
                   hardware="cpu") == [0]
    # A second scrape does not count the same runs again (the histogram is incremental).
    again = scrape(client)["kerneltune_evaluation_stage_seconds"]
    assert samples(again, "kerneltune_evaluation_stage_seconds_count", stage="compile") == [2]


def test_json_logs_carry_job_and_run_ids() -> None:
    stream = io.StringIO()
    handler = configure_json_logging(logging.INFO, stream)
    try:
        log = logging.getLogger("kerneltune.worker")
        with log_context(job_id=7, run_id="r-1"):
            log.info("evaluating run %s", "r-1")
        log.warning("plain", extra={"job_id": 8})
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
    finally:
        logging.getLogger().removeHandler(handler)
    lines = [json.loads(x) for x in stream.getvalue().splitlines()]
    assert len(lines) == 3
    first = lines[0]
    assert (first["level"], first["logger"], first["message"], first["job_id"], first["run_id"]) == (
        "info", "kerneltune.worker", "evaluating run r-1", 7, "r-1")
    assert first["time"].endswith("+00:00") and "run_id" not in lines[1] and lines[1]["job_id"] == 8
    assert "ValueError: boom" in lines[2]["exc"]


def test_api_request_lines_are_json(client: TestClient, capsys: Any) -> None:
    client.get("/v1/jobs/12345")
    err = capsys.readouterr().err
    lines = [json.loads(x) for x in err.splitlines() if x.startswith("{")]
    [line] = [x for x in lines if x.get("logger") == "kerneltune.access" and x.get("path") == "/v1/jobs/12345"]
    assert (line["status"], line["job_id"], line["method"], line["token"]) == (404, "12345", "GET", "test-admin")
    assert line["duration_ms"] >= 0


def test_a_winner_measured_at_one_m_of_its_bucket_is_counted_unchecked(
        client: TestClient, run_result: Callable[..., dict[str, Any]]) -> None:
    v = client.post("/v1/variants", json={"slot": "dense_gemm", "language": "torch",
                                          "source": "def build(config, shape):\n    pass\n",
                                          "config_space": {"BLOCK": [64]}, "provenance": {"author": "a"}}).json()
    job = client.post("/v1/jobs", json={"variant_id": v["id"], "deployment": {**DEPLOY, "batch_sizes": [8]},
                                        "shapes": ["o_proj"]}).json()
    [run] = [r["id"] for r in client.get(f"/v1/jobs/{job['job']['id']}/runs").json()]
    with client.app.state.session_factory() as s:  # type: ignore[attr-defined]
        claim_run(s, run, "w1@host", 30)
        record_result(s, run, run_result(run))
    fams = scrape(client)  # bucket 5-8's winner was checked at M = 8: M = 5, 6 and 7 are open
    assert samples(fams["kerneltune_winners"], "kerneltune_winners", hardware="cpu", state="unchecked") == [1]
    assert samples(fams["kerneltune_winner_unchecked_batch_sizes"], "kerneltune_winner_unchecked_batch_sizes",
                   hardware="cpu") == [3]
