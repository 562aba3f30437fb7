"""The replay device answers runs from a recorded landscape (here synthetic: a roofline model, not
measurements), RunResult-shaped and marked as replay, and its answers are stored like any worker's."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from db.models import Run
from db.queries import jobs as jobs_q
from db.queries import runs as runs_q
from db.queries import variants as variants_q
from kernels.deployment import Deployment
from kernels.slots.base import Shape
from search.landscape import Landscape, synthetic_gemm_landscape
from search.space import ConfigSpace
from workers import replay_device
from workers.protocol import Verdict
from workers.tasks import bench_for, worker_device

SPACE = {"BLOCK_N": [32, 64, 128, 256], "BLOCK_K": [64, 128, 256], "SPLIT_K": {"pow2": [1, 8]},
         "num_warps": [4, 8], "num_stages": {"range": [2, 4]},
         "constraints": ["BLOCK_K * SPLIT_K <= K", "BLOCK_N <= N"]}
DIMS = {"N": 2112, "K": 7168}
SHAPE = Shape("dense_gemm", "fused_qkv_a", dict(DIMS))


@pytest.fixture(scope="module")
def landscape(tmp_path_factory: pytest.TempPathFactory) -> tuple[Landscape, str]:
    land = synthetic_gemm_landscape(SPACE, DIMS, [1, 16], seed=1)
    path = land.save(tmp_path_factory.mktemp("land") / "l.json")
    return land, f"replay:{path}"


def first(land: Landscape, verdict: str, m: int = 16) -> dict:
    return next(r.config for r in land.records if r.verdict == verdict and r.m == m)


def request(config: dict, m: int = 16, seed: int = 5, fidelity: str = "full", shape: Shape = SHAPE,
            run_id: str = "r1"):
    return replay_device.ReplayRequest(run_id=run_id, config=config, shape=shape.to_json(), m=m, seed=seed,
                                       fidelity=fidelity)


def test_passing_config_answers_the_recorded_timings(landscape, monkeypatch: pytest.MonkeyPatch) -> None:
    land, device = landscape
    monkeypatch.setenv("KT_REPLAY_NOISE", "0")
    config = first(land, "ok")
    rec = land.record(config, 16)
    res = replay_device.answer(device, request(config))
    assert res.verdict == Verdict.passed and res.check and res.check.passed
    assert res.bench.median_us == pytest.approx(rec.median_us) and res.bench.timer == "replay"
    assert res.bench.baseline_median_us == pytest.approx(rec.baseline_median_us)
    assert res.bench.speedup == pytest.approx(rec.baseline_median_us / rec.median_us)
    assert res.bench.speedup_ci_lo < res.bench.speedup < res.bench.speedup_ci_hi
    assert res.child_wall_s == rec.cost_s and res.sandbox.exit_code is None  # no child was spawned
    fp = res.fingerprint
    assert fp["replay"] is True and fp["hardware_class"] == "replay" and fp["landscape_source"] == "synthetic"
    assert fp["hardware_key"].startswith("replay-") and "H200" in fp["recorded_hardware"]["name"]

    short = replay_device.answer(device, request(config, fidelity="short"))
    assert short.bench.median_us == pytest.approx(rec.short_median_us) and short.child_wall_s == rec.short_cost_s


def test_noise_is_seeded_per_run_and_inside_the_recorded_spread(landscape) -> None:
    land, device = landscape
    config = first(land, "ok")
    rec = land.record(config, 16)
    a, b, c = (replay_device.answer(device, request(config, seed=s)).bench.median_us for s in (1, 1, 2))
    assert a == b != c
    assert abs(a - rec.median_us) < 3 * (rec.p90_us - rec.p10_us)


def test_failures_and_what_the_landscape_cannot_answer(landscape) -> None:
    land, device = landscape
    failing = replay_device.answer(device, request(first(land, "compile_error")))
    assert failing.verdict == Verdict.compile_failed and failing.bench is None
    assert failing.reason_code == "replay_compile_error"
    checked = replay_device.answer(device, request(first(land, "check_failed")))
    assert checked.verdict == Verdict.check_failed and checked.bench is None

    other = replay_device.answer(device, request(first(land, "ok"), shape=Shape("dense_gemm", "o_proj", {"N": 7168, "K": 1024})))
    assert other.verdict == Verdict.error and other.reason_code == "replay_shape_mismatch"
    missing = replay_device.answer(device, request(first(land, "ok"), m=8))
    assert missing.verdict == Verdict.error and missing.reason_code == "replay_no_record"


def test_worker_device_and_short_bench(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KT_DEVICE", "replay:/some/landscape.json")
    assert replay_device.is_replay(worker_device())
    assert replay_device.landscape_path(worker_device()) == Path("/some/landscape.json")
    assert bench_for("short").min_rounds < bench_for("full").min_rounds
    assert bench_for("short").min_time_s < bench_for("full").min_time_s


@pytest.mark.parametrize("hardware, stored", [("replay", "passed"), ("h200", "error")])
def test_replayed_results_are_stored_only_for_the_replay_queue(landscape, session: Session, hardware: str,
                                                               stored: str) -> None:
    """A replay worker serving kt.h200 by mistake must not make h200 winners out of recorded numbers."""
    land, device = landscape
    config = first(land, "ok")
    variant, _ = variants_q.get_or_create_variant(
        session, slot="dense_gemm", language="torch", source="def build(config, shape):\n    pass\n",
        config_space={k: v for k, v in SPACE.items() if k != "constraints"}, constraints=SPACE["constraints"],
        n_points=1, author="pytest", agent=None, parent_id=None, notes="", declares_library=False)
    plan = [jobs_q.PlannedRun(config, ConfigSpace.canonical(config), SHAPE, 16)]
    _, (run_id,) = jobs_q.create_job(session, variant=variant, deployment=Deployment().model_dump(mode="json"),
                                     model_name="k", hardware=hardware, configs_requested="all", shape_filter=None,
                                     submitted_by=None, plan=plan, queued_lease_seconds=60)
    run = session.get(Run, run_id)
    result = replay_device.answer(device, request(config, seed=run.seed, run_id=run_id))
    assert runs_q.record_result(session, run_id, result.model_dump(mode="json"))
    session.expire_all()
    run = session.get(Run, run_id)
    assert run.verdict == stored and run.fidelity == "full"
    if stored == "passed":
        assert run.median_us == pytest.approx(result.bench.median_us) and run.fingerprint.hardware_class == "replay"
    else:
        assert run.reason_code == "hardware_mismatch"
