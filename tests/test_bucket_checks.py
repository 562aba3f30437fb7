"""POST /v1/winners/bucket-checks (service/bucket_checks.py): a winner measured at one M of its bucket is checked at
the bucket's other M by short runs through the worker's own task; a kernel wrong there loses the bucket to stock,
a right one keeps it and its export no longer lists the bucket as unchecked."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
from fastapi.testclient import TestClient

from db.models import Run
from db.queries.runs import record_result
from tests.support import faulty

REPO = Path(__file__).resolve().parents[1]
RIGHT = (REPO / "kernels/variants/torch/add_rmsnorm_torch.py").read_text()
WRONG_AT_3 = RIGHT + faulty.WRONG_AT_3
CONFIG = {"stats_from": "fp32_sum", "weight_mul": "fp32"}


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("kernel", ["right", "wrong_at_3"])
def test_a_winner_is_checked_at_the_m_of_its_bucket_no_run_measured(
        kernel: str, client: TestClient, enqueue_recorder: Any, run_result: Callable[..., dict[str, Any]], db_url: str,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from workers.tasks import evaluate_run

    source = RIGHT if kernel == "right" else WRONG_AT_3
    v = client.post("/v1/variants", json={"slot": "add_rmsnorm", "language": "torch", "source": source,
                                          "config_space": {k: [x] for k, x in CONFIG.items()},
                                          "provenance": {"author": "alice"}}).json()
    made = client.post("/v1/jobs", json={"variant_id": v["id"], "hardware": "cpu", "configs": [CONFIG],
                                         "deployment": {"spec": "tiny-moe", "tp": 1, "batch_sizes": [4]}}).json()
    model = made["job"]["model_name"]
    [at_4] = enqueue_recorder.calls[-1][0]
    factory = client.app.state.session_factory
    with factory() as s:  # the M = 4 run as a worker reports it: it won bucket 3-4
        assert record_result(s, at_4, run_result(at_4))
    ask = {"hardware": "cpu", "model": model}
    strict = client.post("/v1/exports", json={**ask, "every_m": True})  # its one winner was checked at M = 4 only
    assert strict.status_code == 409 and "served at M=3, checked at M=4 only" in strict.text, strict.text

    r = client.post("/v1/winners/bucket-checks", json=ask)
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["entries"] == 1 and body["runs"] == 1 and body["jobs"][0]["job"]["kind"] == "bucket_check"
    [at_3] = enqueue_recorder.calls[-1][0]
    with factory() as s:
        run = s.get(Run, at_3)
        assert run is not None and (run.m, run.batch_bucket, run.fidelity) == (3, "3-4", "short")
        assert run.config == CONFIG and run.variant_id == v["id"]
    again = client.post("/v1/winners/bucket-checks", json=ask).json()
    assert again["runs"] == 0 and again["jobs"] == []  # queued already: not planned twice

    monkeypatch.setenv("KT_DATABASE_URL", db_url)
    monkeypatch.setenv("KT_DATA_DIR", str(tmp_path / "worker"))
    monkeypatch.setenv("KT_DEVICE", "cpu")
    verdict = evaluate_run(at_3)  # the worker's task: sandboxed child, check, short timing
    [winner] = [w for w in client.get("/v1/winners", params={"slot": "add_rmsnorm", "hardware": "cpu"}).json()
                if w["batch_bucket"] == "3-4"]
    if kernel == "wrong_at_3":
        assert verdict == "check_failed"
        assert winner["is_stock"] is True  # the config failed at an M its bucket serves: no longer a candidate
        assert client.post("/v1/winners/bucket-checks", json=ask).json()["entries"] == 0
        return
    assert verdict == "passed"
    assert winner["evidence"]["run_id"] == at_4  # a short run never ranks, however fast
    assert client.post("/v1/winners/bucket-checks", json=ask).json()["entries"] == 0  # every M of 3-4 is covered
    exported = client.post("/v1/exports", json={**ask, "every_m": True}).json()
    assert exported["entries"] == 1 and exported["unchecked"] == [] and exported["skipped"] == []
