"""The CuTe tensor-core GEMV (kernels/variants/cute/dense_gemm_mma_gemv.py) on a machine with no GPU: its sm_90a
build through the CuTe backend and what its PTX shows: the MMA count (two per W vector pair and n-tile), the load
count (W and x vectors, each once), the fragments taken straight from the loads' registers in both orientations
(W as the MMA's A operand in 16-row tiles, or as its B operand in 8-row tiles), the fence that keeps a chunk's
loads ahead of its MMAs, one barrier, one store per output, and the constraints. Its numbers are checked on
the GPU by the service's own check stage at every batch size a plan runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cute_ptx_helpers import FUSED_QKV_A, O_PROJ, ROOT, load_variant, plan_runs, ptx_of, shape

VARIANT = ROOT / "kernels/variants/cute/dense_gemm_mma_gemv.py"
MMA = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"


@pytest.fixture()
def mod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    return load_variant(VARIANT, tmp_path, monkeypatch)


def lines(ptx: str) -> list[str]:
    return [ln.strip() for ln in ptx.splitlines()]


@pytest.mark.parametrize(("config", "m", "w_vectors", "mmas"), [
    # W as A: rows g, g + 8 of a 16-row tile; an MMA per K half and n-tile (8 columns of M)
    ({"WROWS": 16, "RT": 1, "KWARPS": 14, "UNROLL": 16}, 16, 2, 2 * 2),
    ({"WROWS": 16, "RT": 2, "KWARPS": 7, "UNROLL": 8}, 4, 4, 2 * 2),
    # W as B: row g of an 8-row tile; x rows g, g + 8 are A (rows 8-15 are zeros when M <= 8)
    ({"WROWS": 8, "RT": 1, "KWARPS": 14, "UNROLL": 16}, 16, 1, 2),
    ({"WROWS": 8, "RT": 2, "KWARPS": 28, "UNROLL": 8}, 1, 2, 2 * 2),
])
def test_mmas_per_step_and_every_vector_loaded_once(mod, config: dict, m: int, w_vectors: int, mmas: int) -> None:
    ptx = ptx_of(mod, config, shape(m, **FUSED_QKV_A))
    assert ".target sm_90a" in ptx and all(c in ptx for c in mod.CLAIMS["ptx_contains"])
    body = lines(ptx)
    steps = FUSED_QKV_A["K"] // 32 // config["KWARPS"]
    x_vectors = (m + 7) // 8    # one x vector per 8-row group of M per step
    assert sum(ln.startswith("mma.sync") for ln in body) == mmas * steps
    assert sum(ln.startswith("ld.global") and ".v4" in ln for ln in body) == (w_vectors + x_vectors) * steps
    assert len(re.findall(r"\bbar\.sync\b", ptx)) == 1
    assert ".local" not in ptx


def mma_operands(ptx: str) -> tuple[dict, list[str], list[str]]:
    """The first MMA's A and B registers, and each v4 load's registers by (base register, byte offset)."""
    loads = re.findall(r"ld\.global\.v4\.u32\s+\{(%r\d+), (%r\d+), (%r\d+), (%r\d+)\}, \[(%rd\d+)(?:\+(\d+))?\]",
                       ptx)
    mma = re.search(re.escape(MMA) + r"\s*\{[^}]*\},\s*\{([^}]*)\},\s*\{([^}]*)\}", ptx)
    assert mma, "no mma.sync in the PTX"
    by_offset = {(base, int(off or 0)): regs for *regs, base, off in loads}
    return by_offset, [r.strip() for r in mma.group(1).split(",")], [r.strip() for r in mma.group(2).split(",")]


ROW8 = 8 * FUSED_QKV_A["K"] * 2  # bytes from row g to row g + 8 of W (or of x, which has the same K)


@pytest.mark.parametrize(("config", "m"), [
    ({"WROWS": 16, "RT": 1, "KWARPS": 14, "UNROLL": 16}, 1),   # A: W rows g, g + 8; B: x row g
    ({"WROWS": 8, "RT": 1, "KWARPS": 14, "UNROLL": 16}, 16),   # A: x rows g, g + 8 (two loads at M = 16); B: W row g
])
def test_the_fragments_are_the_load_registers_themselves(mod, config: dict, m: int) -> None:
    """A's four registers are bf16 pairs 0-1 of its rows g and g + 8, then pairs 2-3; B's are the other operand's
    pairs 0-1, 2-3: the permuted-K map that makes a 16-byte load an operand with no shuffling."""
    by_offset, a_regs, b_regs = mma_operands(ptx_of(mod, config, shape(m, **FUSED_QKV_A)))
    a_base = min(base for base, _ in by_offset if (base, ROW8) in by_offset)  # rows g and g + 8 of one tensor
    a_lo, a_hi = by_offset[(a_base, 0)], by_offset[(a_base, ROW8)]
    assert a_regs == [a_lo[0], a_hi[0], a_lo[1], a_hi[1]]
    assert any(regs[:2] == b_regs for (base, _), regs in by_offset.items() if base != a_base)


@pytest.mark.parametrize(("config", "m", "fences"), [
    ({"WROWS": 8, "RT": 1, "KWARPS": 8, "UNROLL": 7, "FENCE": 1}, 16, 4),    # 28 steps in 4 chunks
    ({"WROWS": 16, "RT": 1, "KWARPS": 4, "UNROLL": 8, "FENCE": 1}, 1, 7),    # 56 steps in 7 chunks
    ({"WROWS": 8, "RT": 1, "KWARPS": 8, "UNROLL": 7, "FENCE": 0}, 16, 0),
])
def test_a_fenced_chunk_issues_all_its_loads_before_its_first_mma(mod, config: dict, m: int, fences: int) -> None:
    body = lines(ptx_of(mod, config, shape(m, **FUSED_QKV_A)))
    assert sum(ln.startswith("fence.acq_rel.cta") for ln in body) == fences
    if fences:
        first_mma = next(i for i, ln in enumerate(body) if ln.startswith("mma.sync"))
        first_fence = next(i for i, ln in enumerate(body) if ln.startswith("fence."))
        per_chunk = ((config["WROWS"] // 8) * config["RT"] + (m + 7) // 8) * config["UNROLL"]
        assert first_fence < first_mma
        assert sum(ln.startswith("ld.global") and ".v4" in ln for ln in body[:first_fence]) == per_chunk


@pytest.mark.parametrize(("config", "m", "stores"), [
    ({"WROWS": 16, "RT": 4, "KWARPS": 1, "UNROLL": 4}, 16, 32),   # 1024 outputs over 32 threads
    ({"WROWS": 16, "RT": 1, "KWARPS": 8, "UNROLL": 4}, 4, 1),     # 64 outputs, 256 threads
    ({"WROWS": 8, "RT": 2, "KWARPS": 1, "UNROLL": 4}, 16, 8),     # 256 outputs over 32 threads
])
def test_every_output_has_a_thread_that_stores_it(mod, config: dict, m: int, stores: int) -> None:
    ptx = ptx_of(mod, config, shape(m, **O_PROJ))
    assert len(re.findall(r"^\s*st\.global\.b16", ptx, re.M)) == stores


@pytest.mark.parametrize(("config", "shp", "rule"), [
    ({"RT": 1, "KWARPS": 1, "UNROLL": 1}, shape(17, **FUSED_QKV_A), "M <= 16"),
    ({"WROWS": 16, "RT": 4, "KWARPS": 1, "UNROLL": 1}, shape(1, 1040, 1024), "N % (WROWS * RT) == 0"),
    ({"WROWS": 8, "RT": 1, "KWARPS": 3, "UNROLL": 1}, shape(1, **FUSED_QKV_A), "K % (32 * KWARPS) == 0"),
    ({"WROWS": 16, "RT": 2, "KWARPS": 1, "UNROLL": 16}, shape(1, **FUSED_QKV_A), "RT * WROWS // 8 * UNROLL <= 32"),
    ({"WROWS": 8, "RT": 1, "KWARPS": 16, "UNROLL": 4}, shape(1, 1536, 1536), "UNROLL <= K // (32 * KWARPS)"),
    ({"WROWS": 16, "RT": 4, "KWARPS": 16, "UNROLL": 1}, shape(16, **O_PROJ),
     "KWARPS * WROWS * RT * ((M + 7) // 8) <= 1024"),
    ({"WROWS": 8, "RT": 1, "KWARPS": 4, "UNROLL": 14, "FENCE": 1}, shape(16, **FUSED_QKV_A),
     "FENCE * (RT * WROWS // 8 + (M + 7) // 8) * UNROLL <= 40"),
    ({"WROWS": 16, "RT": 1, "KWARPS": 28, "UNROLL": 8, "FENCE": 1}, shape(1, **FUSED_QKV_A),
     "FENCE * ((RT * WROWS // 8 + (M + 7) // 8) * UNROLL * 4 + 24) * 32 * KWARPS <= 65536"),
])
def test_constraints_refuse_ragged_or_register_hungry_configs(mod, config: dict, shp: dict, rule: str) -> None:
    with pytest.raises(ValueError, match=re.escape(rule)):
        mod._params(config, shp)


@pytest.mark.parametrize(("plan_name", "runs"), [("mma_gemv_zn", 90), ("zn_all", 108), ("zo_fenced", 36), ("zn_h100_rest", 50)])
def test_the_zn_and_zo_plans_hold_only_configs_the_service_takes(plan_name: str, runs: int, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    seen = plan_runs(plan_name, tmp_path, monkeypatch)
    assert len(seen) == len(set(seen)) == runs
    # the H200 plan leaves M = 16 to the tensor-core kernel
    assert plan_name != "zn_all" or not any(f.endswith("ksplit_gemv.py") and m == 16 for f, _, m, _ in seen)
