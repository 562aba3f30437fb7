"""The attention input's kernels chained by programmatic dependent launch (build's pdl), on a machine with no GPU:
what their sm_90a PTX shows. A chained kernel lets the next one launch (griddepcontrol.launch_dependents) before
anything else, touches only its weights until griddepcontrol.wait (x is the previous kernel's output, so a read of
it before the wait could see stale bytes), and at level 2 asks its W slice into L2 first. The chained path's
numbers are checked on the GPU by bench/attn_block.py, which compares every output with stock's."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch

from cute_ptx_helpers import FUSED_QKV_A, ROOT, load_variant, shape
from test_dense_gemm_ring_gemv import ring_events, replay

sys.path.insert(0, str(ROOT / "bench"))
import attn_block  # noqa: E402
from attn_block import load  # noqa: E402  (a variant file by its stem, as the block loads it)
from workers.chain import device_chains  # noqa: E402

RING = ROOT / "kernels/variants/cute/dense_gemm_ring_gemv.py"
KSPLIT = ROOT / "kernels/variants/cute/dense_gemm_ksplit_gemv.py"
Q_B = {"M": 1, "N": 3072, "K": 1536, "eps": 1e-6}


def cute_ptx(mod, config: dict, shp: dict, pdl: int) -> list[str]:
    from kernels.backends.cute_backend import compile_cute_ptx

    return [ln.strip() for ln in compile_cute_ptx(*mod.compile_target(config, shp, pdl)).splitlines()]


def unguarded(ln: str) -> str:  # "@%p1 ld.global..." -> "ld.global..."
    return re.sub(r"^@!?%p\d+\s+", "", ln)


def first(body: list[str], prefix: str) -> int:
    return next(i for i, ln in enumerate(body) if unguarded(ln).startswith(prefix))


def before(body: list[str], prefix: str, end: int) -> int:
    return sum(unguarded(ln).startswith(prefix) for ln in body[:end])


@pytest.fixture()
def ring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    return load_variant(RING, tmp_path, monkeypatch)


@pytest.fixture()
def ksplit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    return load_variant(KSPLIT, tmp_path, monkeypatch)


@pytest.mark.parametrize(("config", "m", "pdl"), [
    ({"WROWS": 16, "RT": 1, "KWARPS": 8, "STAGES": 8, "XRING": 1, "KSPLIT": 1, "ROTATE": 1}, 16, 1),
    ({"WROWS": 16, "RT": 1, "KWARPS": 8, "STAGES": 8, "XRING": 1, "KSPLIT": 1, "ROTATE": 1}, 4, 2),
    ({"WROWS": 8, "RT": 2, "KWARPS": 4, "STAGES": 6, "XRING": 0, "KSPLIT": 1, "ROTATE": 0}, 1, 1),
    ({"WROWS": 16, "RT": 2, "KWARPS": 4, "STAGES": 4, "XRING": 1, "KSPLIT": 2, "ROTATE": 0}, 16, 2),
])
def test_a_chained_ring_gemv_fetches_only_w_before_the_wait(ring, config: dict, m: int, pdl: int) -> None:
    body = cute_ptx(ring, config, shape(m, **FUSED_QKV_A), pdl)
    plain = cute_ptx(ring, config, shape(m, **FUSED_QKV_A), 0)
    assert not any(ln.startswith("griddepcontrol") for ln in plain)
    trigger, wait = first(body, "griddepcontrol.launch_dependents"), first(body, "griddepcontrol.wait")
    assert trigger < first(body, "cp.async") < wait
    w_per_step = config["RT"] * config["WROWS"] // 8
    # the prologue's W copies (STAGES - 1 steps) and nothing of x (ring copies through L1, or plain loads)
    assert before(body, "cp.async.cg.shared.global", wait) == w_per_step * (config["STAGES"] - 1)
    assert before(body, "cp.async.ca.", wait) == 0 and before(body, "ld.global", wait) == 0
    # the same copies, reads and MMAs as the plain build, and every read still waits for its own copy
    for prefix in ("cp.async.cg.", "cp.async.ca.", "ld.shared.v4", "mma.sync", "ld.global", "st.global"):
        assert sum(ln.startswith(prefix) for ln in body) == sum(ln.startswith(prefix) for ln in plain), prefix
    steps = FUSED_QKV_A["K"] // 32 // config["KWARPS"] // config["KSPLIT"]
    reads, _ = replay(ring_events("\n".join(body)))
    assert reads == (w_per_step + config["XRING"] * ((m + 7) // 8)) * steps
    prefetches = [ln for ln in body if ln.startswith("cp.async.bulk.prefetch.L2.global")]
    assert len(prefetches) == (1 if pdl == 2 else 0)   # one per row, a thread each: one predicated instruction
    if pdl == 2:
        assert first(body, "cp.async.bulk.prefetch") < wait
    assert ".local" not in "\n".join(body)


def prefetch_sizes(body: list[str]) -> list[int]:
    """The byte counts of the PTX's bulk L2 prefetches (their size register's mov.b32 immediate)."""
    movs = {m.group(1): int(m.group(2)) for ln in body if (m := re.match(r"mov\.b32\s+(%r\d+), (\d+);", ln))}
    return [movs[m.group(1)] for ln in body
            if (m := re.search(r"cp\.async\.bulk\.prefetch\.L2\.global \[%rd\d+\], (%r\d+);", ln))]


@pytest.mark.parametrize(("ksplit_ctas", "m"), [(1, 1), (2, 16)])
def test_the_l2_prefetch_asks_for_each_rows_k_slice(ring, ksplit_ctas: int, m: int) -> None:
    config = {"WROWS": 16, "RT": 1, "KWARPS": 4, "STAGES": 4, "XRING": 1, "KSPLIT": ksplit_ctas, "ROTATE": 0}
    assert prefetch_sizes(cute_ptx(ring, config, shape(m, **FUSED_QKV_A), 2)) == [FUSED_QKV_A["K"] // ksplit_ctas * 2]


def test_pdl_levels_are_checked(ring, ksplit) -> None:
    config = {"WROWS": 16, "RT": 1, "KWARPS": 8, "STAGES": 8, "XRING": 1, "KSPLIT": 1, "ROTATE": 1}
    with pytest.raises(ValueError, match="pdl=3"):
        ring.compile_target(config, shape(1, **FUSED_QKV_A), 3)
    with pytest.raises(ValueError, match="pdl=3"):
        ksplit.compile_target({"ROWS": 1, "KWARPS": 14, "UNROLL": 2}, shape(1, **FUSED_QKV_A), 3)


@pytest.mark.parametrize(("config", "m", "pdl"), [
    ({"ROWS": 1, "KWARPS": 14, "UNROLL": 2}, 1, 1),     # the H200's fused_qkv_a M = 1 winner: one round trip
    ({"ROWS": 1, "KWARPS": 14, "UNROLL": 2}, 1, 2),
    ({"ROWS": 2, "KWARPS": 4, "UNROLL": 2}, 4, 1),      # more chunks than one: only the first is fetched early
])
def test_a_chained_ksplit_gemv_loads_its_first_w_chunk_before_the_wait(ksplit, config: dict, m: int,
                                                                      pdl: int) -> None:
    body = cute_ptx(ksplit, config, shape(m, **FUSED_QKV_A), pdl)
    plain = cute_ptx(ksplit, config, shape(m, **FUSED_QKV_A), 0)
    trigger, wait = first(body, "griddepcontrol.launch_dependents"), first(body, "griddepcontrol.wait")
    assert trigger < first(body, "ld.global") < wait
    steps = FUSED_QKV_A["K"] // 8 // (32 * config["KWARPS"])
    assert before(body, "ld.global", wait) == config["ROWS"] * min(config["UNROLL"], steps)   # W only
    assert sum(ln.startswith("ld.global") for ln in body) == sum(ln.startswith("ld.global") for ln in plain)
    assert prefetch_sizes(body[:wait]) == ([FUSED_QKV_A["K"] * 2] if pdl == 2 else [])   # whole rows
    assert ".local" not in "\n".join(body)


@pytest.mark.parametrize("pdl", [1, 2])
def test_a_chained_rmsnorm_gemm_reads_nothing_before_the_wait(pdl: int) -> None:
    mod = load("rmsnorm_gemm_fused")
    config = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 256, "SPLIT_K": 6, "num_warps": 2, "num_stages": 2}
    body = [ln.strip() for ln in mod.compile_ptx(config, Q_B, pdl=pdl).splitlines()]
    plain = mod.compile_ptx(config, Q_B)
    assert "griddepcontrol" not in plain
    trigger, wait = first(body, "griddepcontrol.launch_dependents"), first(body, "griddepcontrol.wait")
    assert trigger < wait
    prefetch = [i for i, ln in enumerate(body) if "cp.async.bulk.prefetch.L2.global" in ln]
    if pdl == 1:
        assert not prefetch
    else:
        assert len(prefetch) == config["BLOCK_N"] and trigger < prefetch[0] and prefetch[-1] < wait
        assert prefetch_sizes(body) == [Q_B["K"] // config["SPLIT_K"] * 2] * config["BLOCK_N"]   # a row's K slice
    assert before(body, "ld.global", wait) == 0 and before(body, "cp.async.c", wait) == 0


def test_the_head_of_the_chain_lets_the_next_kernel_launch_first() -> None:
    mod = load("add_rmsnorm_fused")
    body = [ln.strip() for ln in mod.compile_ptx({}, {"H": 7168}, pdl=True).splitlines()]
    assert first(body, "griddepcontrol.launch_dependents") < first(body, "ld.global")
    assert "griddepcontrol.wait" not in "\n".join(body)   # launched plainly: nothing before it to wait for
    assert "griddepcontrol" not in mod.compile_ptx({}, {"H": 7168})


def test_the_block_builds_each_link_it_can_chain_and_says_which(tmp_path: Path) -> None:
    """On the CPU (no chains: the interpreter has no grid dependencies) the block times only the plain path; the
    builder itself chains every kernel whose build takes pdl and names the one it ran plainly."""
    from test_attn_block import SMALL

    assert not device_chains(torch.device("cpu"))
    *_, used = attn_block.build_kernels(1, (256, 128, 64, 16, 96), json.loads(json.dumps(SMALL)), pdl=1)
    assert used["chained"] == {"pdl": 1, "add_rmsnorm": True, "fused_qkv_a": False, "mla_norms_gemm": True}
    *_, apart = attn_block.build_kernels(1, (256, 128, 64, 16, 96), SMALL, pdl=1, kv_fused=False)
    assert apart["chained"] == {"pdl": 1, "add_rmsnorm": True, "fused_qkv_a": False, "rmsnorm_gemm": True}
    *_, plain = attn_block.build_kernels(1, (256, 128, 64, 16, 96), SMALL)
    assert "chained" not in plain


def test_a_chained_split_k_gemm_waits_before_it_reads_anything() -> None:
    """The Triton split-K GEMM (the H200's fused_qkv_a M = 16 winner) chains without an early weight fetch."""
    mod = load("dense_gemm_splitk")
    config = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 128, "SPLIT_K": 4, "num_warps": 4, "num_stages": 3,
              "REDUCE": "last_cta"}
    shp = {"M": 16, "N": 2112, "K": 7168}
    assert "griddepcontrol" not in mod.compile_ptx(config, shp, "sm_90a")
    body = [ln.strip() for ln in mod.compile_ptx(config, shp, "sm_90a", pdl=1).splitlines()]
    trigger, wait = first(body, "griddepcontrol.launch_dependents"), first(body, "griddepcontrol.wait")
    assert trigger < wait
    assert before(body, "ld.global", wait) == 0 and before(body, "cp.async", wait) == 0
    with pytest.raises(ValueError, match="pdl=5"):
        mod.build(config, shp, pdl=5)
