"""The CuTe K-split GEMV (kernels/variants/cute/dense_gemm_ksplit_gemv.py) on a machine with no GPU: its sm_90a
build through the CuTe backend, what its PTX shows (every W load of a CTA before the first FMA when UNROLL
covers the K range, one barrier, no spills) and the constraints that keep each thread's K steps whole.
Its numbers are checked on the GPU by the service's own check stage at every batch size a plan runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cute_ptx_helpers import FUSED_QKV_A, ROOT, load_variant, ptx_of, shape

VARIANT = ROOT / "kernels/variants/cute/dense_gemm_ksplit_gemv.py"
PLANS = ROOT / "bench/plans"


@pytest.fixture()
def mod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    return load_variant(VARIANT, tmp_path, monkeypatch)


def test_builds_for_sm90a_with_its_claims(mod) -> None:
    ptx = ptx_of(mod, {"ROWS": 2, "KWARPS": 3, "UNROLL": 2}, shape(3, 96, 1536))
    assert ".target sm_90a" in ptx
    assert all(c in ptx for c in mod.CLAIMS["ptx_contains"])


@pytest.mark.parametrize(("config", "m", "w_loads"), [
    ({"ROWS": 4, "KWARPS": 7, "UNROLL": 4}, 4, 16),   # 28 steps / 7 warps = 4 a thread, x 4 rows: one round trip
    ({"ROWS": 2, "KWARPS": 14, "UNROLL": 2}, 1, 4),
])
def test_a_thread_issues_its_whole_w_range_before_the_first_fma(mod, config: dict, m: int, w_loads: int) -> None:
    ptx = ptx_of(mod, config, shape(m, **FUSED_QKV_A))
    body = [ln.strip() for ln in ptx.splitlines()]
    first_fma = next(i for i, ln in enumerate(body) if ln.startswith("fma."))
    w_before = sum(1 for ln in body[:first_fma] if ln.startswith("ld.global") and ".v4" in ln)
    # the W vectors plus at most one x vector (the first step's x, loaded before its FMAs)
    assert w_loads <= w_before <= w_loads + 1, (w_before, w_loads)
    # every FMA of the K range is there, unrolled: M * ROWS * 8 per step
    steps = FUSED_QKV_A["K"] // 8 // (32 * config["KWARPS"])
    assert sum(1 for ln in body if ln.startswith("fma.")) == m * config["ROWS"] * 8 * steps
    assert len(re.findall(r"\bbar\.sync\b", ptx)) == 1


@pytest.mark.parametrize(("config", "m", "stores"), [
    ({"ROWS": 4, "KWARPS": 1, "UNROLL": 4}, 16, 2),   # 64 outputs, 32 threads: two each
    ({"ROWS": 2, "KWARPS": 4, "UNROLL": 1}, 4, 1),    # 8 outputs, 128 threads
])
def test_every_output_has_a_thread_that_stores_it(mod, config: dict, m: int, stores: int) -> None:
    ptx = ptx_of(mod, config, shape(m, 7168, 1024))  # o_proj
    assert len(re.findall(r"^\s*st\.global\.b16", ptx, re.M)) == stores


@pytest.mark.parametrize(("config", "shp", "rule"), [
    ({"ROWS": 4, "KWARPS": 8, "UNROLL": 1}, shape(4, **FUSED_QKV_A), "(K // 8) % (32 * KWARPS) == 0"),  # 3.5 steps
    ({"ROWS": 8, "KWARPS": 7, "UNROLL": 4}, shape(16, **FUSED_QKV_A), "M * ROWS <= 64"),
    ({"ROWS": 8, "KWARPS": 2, "UNROLL": 8}, shape(1, **FUSED_QKV_A), "ROWS * UNROLL <= 32"),
    ({"ROWS": 1, "KWARPS": 14, "UNROLL": 4}, shape(1, **FUSED_QKV_A), "UNROLL <= K // (256 * KWARPS)"),
    ({"ROWS": 3, "KWARPS": 1, "UNROLL": 1}, shape(1, 1024, 256), "N % ROWS == 0"),
])
def test_constraints_refuse_ragged_or_register_hungry_configs(mod, config: dict, shp: dict, rule: str) -> None:
    with pytest.raises(ValueError, match=re.escape(rule)):
        mod._params(config, shp)


@pytest.mark.parametrize(("plan_name", "runs"), [("zl", 72), ("zl2", 30), ("zl_all", 102)])
def test_the_zl_plans_hold_only_configs_the_variant_accepts(mod, plan_name: str, runs: int) -> None:
    from kernels.deployment import Deployment
    from kernels.slots.dense_gemm import DenseGemm

    plan = json.loads((PLANS / f"ksplit_gemv_{plan_name}.json").read_text())
    # the shapes the service builds the plan's jobs for
    shapes = {s.name: s for s in DenseGemm().shapes(Deployment(**plan["deployment"]))}
    seen = []
    for item in plan["variants"]:
        assert item["file"] == str(VARIANT.relative_to(ROOT))
        for name in item["shapes"]:
            for m in item["batch_sizes"]:
                for config in item["configs"]:
                    shp = shapes[name].as_build_arg(m)
                    mod._params(config, shp)  # raises on a broken constraint
                    steps = shp["K"] // 8 // (32 * config["KWARPS"])
                    chunks = -(-steps // config["UNROLL"])
                    # the first plan is one or two DRAM round trips per CTA
                    assert plan_name != "zl" or chunks <= 2, (name, config)
                    seen.append((name, m, tuple(sorted(config.items()))))
    assert len(seen) == len(set(seen)) == runs
