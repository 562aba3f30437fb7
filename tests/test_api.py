"""service/: the /v1 API through FastAPI's TestClient, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from db.queries.runs import claim_run, record_result
from service.app import create_app
from service.settings import Settings

SOURCE = "def build(config, shape):\n    raise NotImplementedError\n"
DEPLOY = {"spec": "tiny-moe", "tp": 1, "batch_sizes": [1, 3, 4]}  # 4 dense_gemm shapes, Ms 1, 3, 4
Result = Callable[..., dict[str, Any]]


def variant(client: TestClient, source: str = SOURCE, **over: Any) -> dict[str, Any]:
    body = {"slot": "dense_gemm", "language": "torch", "source": source,
            "config_space": {"BLOCK": [64, 128, 256], "constraints": ["BLOCK <= 128"]},
            "provenance": {"author": "alice", "agent": "agent-x", "notes": "first try"}, **over}
    return client.post("/v1/variants", json=body).json() | {"_body": body}


def job(client: TestClient, variant_id: int, **over: Any) -> Any:
    return client.post("/v1/jobs", json={"variant_id": variant_id, "deployment": DEPLOY, "hardware": "cpu", **over})


def session_of(client: TestClient) -> Session:
    return client.app.state.session_factory()  # type: ignore[attr-defined,no-any-return]


def test_variant_dedup_and_reads(client: TestClient) -> None:
    first = client.post("/v1/variants", json=variant(client)["_body"])  # second identical submission
    assert first.status_code == 200 and first.json()["created"] is False
    v = variant(client)
    assert v["created"] is False and v["id"] == first.json()["id"] and len(v["content_hash"]) == 64
    other = variant(client, source=SOURCE + "# other\n", provenance={"author": "bob", "parent_id": v["id"]})
    assert other["created"] is True
    detail = client.get(f"/v1/variants/{other['id']}").json()
    assert (detail["parent_id"], detail["constraints"], detail["n_points"]) == (v["id"], ["BLOCK <= 128"], 2)
    assert detail["config_space"] == {"BLOCK": [64, 128, 256]} and detail["source"].endswith("# other\n")
    assert [x["id"] for x in client.get("/v1/variants", params={"author": "bob"}).json()] == [other["id"]]
    assert client.get("/v1/variants/999").json() == {"error": "not_found", "detail": "variant 999 does not exist"}


def test_variant_validation_errors(client: TestClient) -> None:
    def post(**over: Any) -> Any:
        return client.post("/v1/variants", json={**_base(), **over})

    r = post(slot="warp_drive")
    assert r.status_code == 422 and "dense_gemm" in r.json()["detail"] and r.json()["error"] == "validation_error"
    r = post(language="cuda")
    assert r.status_code == 422 and "torch, triton, cute" in r.json()["detail"]
    r = post(source="x = 1\n" * 50_000)
    assert r.status_code == 413 and "limit is 262144" in r.json()["detail"]
    assert "does not parse" in post(source="def build(:\n").json()["detail"]
    assert "must define build" in post(source="def other():\n    pass\n").json()["detail"]
    for space, words in [({}, "no parameters"), ({"B": []}, "empty list"), ({"B": "64"}, "expected a list"),
                         ({"B": [1], "constraints": ["__import__('os')"]}, "only min"),
                         ({"B": [1], "constraints": ["B.real > 0"]}, "not allowed"),
                         ({"B": [1], "constraints": ["B <"]}, "not an expression"),
                         ({"B": [1], "constraints": ["Q > 1"]}, "unknown name"),
                         ({"B": [1, 2], "constraints": ["B > 5"]}, "empty"),
                         ({"A": {"range": [1, 1000]}, "B": {"range": [1, 1000]}}, "more than the limit")]:
        r = post(config_space=space)
        assert r.status_code == 422 and words in r.json()["detail"], (space, r.json())
    r = post(provenance={"author": "a", "parent_id": 12345})
    assert r.status_code == 422 and "12345 does not exist" in r.json()["detail"]
    r = client.post("/v1/variants", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and set(r.json()) >= {"error", "detail"}


def _base() -> dict[str, Any]:
    return {"slot": "dense_gemm", "language": "torch", "source": SOURCE, "config_space": {"BLOCK": [64]},
            "provenance": {"author": "alice"}}


def test_constraints_may_read_shape_dims(client: TestClient) -> None:
    v = variant(client, config_space={"BLOCK": [32, 64, 128], "constraints": ["N % BLOCK == 0", "M * BLOCK <= 256"]})
    assert v["created"] is True
    r = job(client, v["id"], shapes=["o_proj"])  # tiny-moe o_proj: N=256; Ms 1, 3, 4
    assert r.status_code == 201, r.json()
    runs = client.get(f"/v1/jobs/{r.json()['job']['id']}/runs").json()
    assert sorted((x["m"], x["config"]["BLOCK"]) for x in runs) == [(1, 32), (1, 64), (1, 128), (3, 32), (3, 64),
                                                                     (4, 32), (4, 64)]


def test_job_fan_out_and_enqueue(client: TestClient, enqueue_recorder: Any) -> None:
    v = variant(client)
    r = job(client, v["id"])
    assert r.status_code == 201, r.json()
    out = r.json()
    assert out["runs"] == 2 * 4 * 3 and out["enqueued"] is True  # 2 configs x 4 shapes x 3 Ms
    [(ids, queue)] = enqueue_recorder.calls
    assert queue == "kt.cpu" and len(set(ids)) == 24
    j = out["job"]
    assert (j["state"], j["progress"]["total"], j["progress"]["queued"], j["model_name"]) == ("queued", 24, 24, "tiny-moe")
    # explicit configs, one shape
    r = job(client, v["id"], configs=[{"BLOCK": 64}, {"BLOCK": 64}], shapes=["lm_head"])
    assert r.json()["runs"] == 3
    assert {x["shape_name"] for x in client.get(f"/v1/jobs/{r.json()['job']['id']}/runs").json()} == {"lm_head"}
    assert [x["id"] for x in client.get("/v1/jobs", params={"variant_id": v["id"]}).json()] == [
        r.json()["job"]["id"], j["id"]]


def test_job_validation_errors(client: TestClient) -> None:
    v = variant(client)
    r = job(client, v["id"], deployment={**DEPLOY, "batch_sizes": [0, 2000]})
    assert r.status_code == 422 and "1..1024" in r.json()["detail"]
    r = job(client, v["id"], shapes=["o_proj", "warp_proj"])
    assert r.status_code == 422 and "warp_proj" in r.json()["detail"] and "fused_qkv_a" in r.json()["detail"]
    r = job(client, v["id"], deployment={**DEPLOY, "spec": "gpt-9"})
    assert r.status_code == 422 and "kimi-k2-like" in r.json()["detail"]
    r = job(client, v["id"], configs=[{"BLOCK": 256}])  # outside the constraints
    assert r.status_code == 422 and "no config is valid" in r.json()["detail"]
    r = job(client, v["id"], configs=[{"TILE": 64}])
    assert r.status_code == 422 and "BLOCK" in r.json()["detail"]
    r = job(client, v["id"], hardware="H200!")
    assert r.status_code == 422
    assert job(client, 4242).status_code == 404
    big = variant(client, source=SOURCE + "# big\n", config_space={"A": {"range": [1, 1000]}})
    r = job(client, big["id"])
    assert r.status_code == 422 and "more than 5000 runs" in r.json()["detail"]


def test_progress_cancel_runs_and_run_detail(client: TestClient, run_result: Result) -> None:
    v = variant(client)
    j = job(client, v["id"], configs=[{"BLOCK": 64}], shapes=["o_proj"]).json()["job"]
    runs = client.get(f"/v1/jobs/{j['id']}/runs").json()
    assert len(runs) == 3 and all(x["status"] == "queued" for x in runs)
    with session_of(client) as s:
        claim_run(s, runs[0]["id"], "w1", 60)
        record_result(s, runs[0]["id"], run_result(runs[0]["id"]))
        claim_run(s, runs[1]["id"], "w1", 60)
    got = client.get(f"/v1/jobs/{j['id']}").json()
    assert got["state"] == "running" and got["progress"]["done"] == 1 and got["progress"]["by_verdict"] == {"passed": 1}
    c = client.post(f"/v1/jobs/{j['id']}/cancel").json()
    assert c["cancelled_runs"] == 1 and c["job"]["state"] == "cancelled" and c["job"]["progress"]["running"] == 1
    passed = client.get(f"/v1/jobs/{j['id']}/runs", params={"verdict": "passed"}).json()
    assert [x["id"] for x in passed] == [runs[0]["id"]] and passed[0]["speedup"] == 2.0
    assert client.get(f"/v1/jobs/{j['id']}/runs", params={"verdict": "nope"}).status_code == 422
    detail = client.get(f"/v1/runs/{runs[0]['id']}").json()
    assert detail["check"]["trials"][0]["seed"] == 11 and detail["bench"]["median_us"] == 10.0
    assert client.get("/v1/runs/nope").status_code == 404
    assert client.post("/v1/jobs/999/cancel").status_code == 404


def test_leaderboard_and_winners(client: TestClient, run_result: Result) -> None:
    v = variant(client)
    j = job(client, v["id"], shapes=["o_proj"], deployment={**DEPLOY, "batch_sizes": [1]}).json()["job"]
    runs = {x["config"]["BLOCK"]: x["id"] for x in client.get(f"/v1/jobs/{j['id']}/runs").json()}
    with session_of(client) as s:
        record_result(s, runs[64], run_result(runs[64], median_us=9.0))
        record_result(s, runs[128], run_result(runs[128], median_us=6.0, ci=(0.97, 1.8)))
    [group] = client.get("/v1/leaderboard", params={"slot": "dense_gemm", "hardware": "cpu", "model": "tiny-moe",
                                                    "shape": "o_proj"}).json()
    assert [(e["rank"], e["run_id"], e["beats_stock"]) for e in group["entries"]] == [(1, runs[128], False),
                                                                                      (2, runs[64], True)]
    assert group["entries"][0]["author"] == "alice" and group["m"] == 1
    [w] = client.get("/v1/winners", params={"slot": "dense_gemm", "hardware": "cpu"}).json()
    assert (w["is_stock"], w["batch_bucket"], w["shape_name"]) == (False, "1", "o_proj")
    ev = w["evidence"]
    assert ev["run_id"] == runs[64] and ev["content_hash"] == v["content_hash"] and ev["author"] == "alice"
    assert ev["fingerprint"]["id"] == "cpu-test-0" and len(ev["check"]["trials"]) == 2
    # A run timed beside the incumbent (runs[64]) and beating it beyond noise: it leads the board and holds the
    # bucket although its median is higher (a slower session), and both answers carry the head-to-head.
    v2 = variant(client, source=SOURCE + "# another variant\n")
    j3 = job(client, v2["id"], shapes=["o_proj"], configs=[{"BLOCK": 64}],
             deployment={**DEPLOY, "batch_sizes": [1]}).json()["job"]
    [challenger] = [x["id"] for x in client.get(f"/v1/jobs/{j3['id']}/runs").json()]
    res = run_result(challenger, median_us=9.3)
    res["bench"].update(control_run_id=runs[64], control_median_us=9.9, vs_control=9.9 / 9.3,
                        vs_control_ci_lo=1.03, vs_control_ci_hi=1.09)
    with session_of(client) as s:
        record_result(s, challenger, res)
    [group] = client.get("/v1/leaderboard", params={"slot": "dense_gemm", "hardware": "cpu", "shape": "o_proj"}).json()
    assert [e["run_id"] for e in group["entries"]] == [runs[128], challenger, runs[64]]  # by ranked_us
    entry = group["entries"][1]
    assert (entry["vs_control_ci_lo"], entry["median_us"]) == (1.03, 9.3)
    assert entry["ranked_us"] == 9.3 * 9.0 / 9.9
    [w] = client.get("/v1/winners", params={"slot": "dense_gemm", "hardware": "cpu"}).json()
    assert w["evidence"]["run_id"] == challenger and w["evidence"]["control_run_id"] == runs[64]
    # A stock winner: nothing beats stock for lm_head.
    j2 = job(client, v["id"], shapes=["lm_head"], configs=[{"BLOCK": 64}],
             deployment={**DEPLOY, "batch_sizes": [1]}).json()["job"]
    [rid] = [x["id"] for x in client.get(f"/v1/jobs/{j2['id']}/runs").json()]
    with session_of(client) as s:
        record_result(s, rid, run_result(rid, verdict="check_failed"))
    stock = [x for x in client.get("/v1/winners").json() if x["shape_name"] == "lm_head"]
    assert [(x["is_stock"], x["evidence"]) for x in stock] == [(True, None)]


def test_catalogue(client: TestClient) -> None:
    slots = {s["name"]: s for s in client.get("/v1/slots").json()}
    assert "dense_gemm" in slots and slots["dense_gemm"]["description"]
    # slots beyond DESIGN.md's catalogue say why they exist; DESIGN.md's own do not need to
    assert slots["moe_experts_shared"]["rationale"] and slots["dense_gemm"]["rationale"] == ""
    shapes = client.get("/v1/slots/dense_gemm", params={"model": "kimi-k2-like", "tp": 8}).json()
    assert {s["name"]: (s["dims"]["N"], s["dims"]["K"]) for s in shapes["shapes"]} == {
        "fused_qkv_a": (2112, 7168), "q_b_proj": (1536, 1536), "o_proj": (7168, 1024), "lm_head": (20480, 7168)}
    assert shapes["token_counts"] == [1, 2, 4, 8, 16, 32, 64]
    assert client.get("/v1/slots/warp").status_code == 404
    assert client.get("/v1/slots/dense_gemm", params={"model": "nope"}).status_code == 422
    models = {m["name"]: m for m in client.get("/v1/models").json()}
    assert models["kimi-k3-unverified"]["verified"] is False and models["deepseek-v3"]["spec"]["n_routed_experts"] == 256


def test_health_ready_and_openapi(client: TestClient) -> None:
    assert client.get("/v1/health").json() == {"status": "ok"}
    assert client.get("/v1/ready").json() == {"status": "ready", "database": "ok", "broker": "ok"}

    def down() -> None:
        raise ConnectionRefusedError("broker at 127.0.0.1:6379 refused")
    client.app.state.broker_ping = down  # type: ignore[attr-defined]
    r = client.get("/v1/ready")
    assert r.status_code == 503 and r.json()["error"] == "not_ready" and "refused" in r.json()["detail"]
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/v1/variants", "/v1/jobs/{job_id}/cancel", "/v1/leaderboard", "/v1/winners", "/v1/ready"} <= set(paths)
    assert client.get("/v1/nothing").json()["error"] == "not_found"


def test_enqueue_failure_leaves_runs_for_the_sweeper(client: TestClient, enqueue_recorder: Any) -> None:
    from db.queries.runs import stale_runs

    enqueue_recorder.fail_with = ConnectionError("broker down")
    out = job(client, variant(client)["id"], shapes=["o_proj"]).json()
    assert out["enqueued"] is False and "broker down" in out["enqueue_error"]
    with session_of(client) as s:
        assert len(stale_runs(s)) == out["runs"] == 6


def test_database_down_is_503(tmp_path: Path) -> None:
    settings = Settings(database_url="postgresql+psycopg://postgres@127.0.0.1:1/none", broker_url="memory://",
                        data_dir=tmp_path, migrate_on_startup=False)
    with TestClient(create_app(settings, enqueue_runs=lambda ids, q: None, broker_ping=lambda: None)) as c:
        r = c.get("/v1/variants", headers={"Authorization": "Bearer kt_any"})  # checking it needs the DB
        body = r.json()
        assert (r.status_code, body["error"]) == (503, "database_unavailable")
        assert body["detail"].startswith("database unavailable"), body
        r = c.get("/v1/ready")
        assert r.status_code == 503 and "database unreachable" in r.json()["detail"]
