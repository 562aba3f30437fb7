"""o_proj (with the residual and the norm), the router and the routed experts chained by programmatic dependent
launch (each build's pdl=1), on a machine with no GPU: what their sm_90a PTX shows. A chained kernel may start
while the kernel ahead still runs, so before griddepcontrol.wait it may read its weights and nothing else; w13
must also hold back w2's launch until after its own wait, because w2 reads the router's ids before its wait. The
chained forms' numbers are checked on the GPU by the service (workers/chain.py's race) and bench/decode_layer.py."""

from __future__ import annotations

import sys

import pytest
import torch

from cute_ptx_helpers import ROOT
from test_pdl_chain import before, first

sys.path.insert(0, str(ROOT / "bench"))
from moe_block import load  # noqa: E402  (a variant file by its stem, as the block loads it)
from workers.chain import takes_pdl  # noqa: E402

ROUTER = {"E": 384, "K": 7168, "top_k": 8, "n_group": 1, "topk_group": 1, "scaling": 2.827, "scoring": "sigmoid",
          "norm": True, "M": 1}
# the H200 table of record's M = 1 router winner (tensor-core tiles, separate epilogue), and a one-launch fma form
ROUTER_DOT = {"MATH": "dot", "BLOCK_E": 64, "BLOCK_K": 256, "SPLIT_K": 16, "BLOCK_M": 16, "EPILOGUE": "separate",
              "EPI_M": 1, "EPI_WARPS": 4, "TOPK": "bitonic", "num_warps": 2, "num_stages": 3}
ROUTER_FMA = {"MATH": "fma", "BLOCK_E": 16, "BLOCK_K": 256, "SPLIT_K": 14, "BLOCK_M": 1, "EPILOGUE": "fused",
              "EPI_M": 1, "EPI_WARPS": 1, "TOPK": "pick", "PDL": 0, "num_warps": 4, "num_stages": 2}
MOE = {"M": 1, "K": 7168, "I": 256, "top_k": 8, "E": 384}
MOE_CFG = {"BLOCK_N": 2, "BLOCK_K": 1024, "SPLIT_K": 1, "num_warps": 8, "BLOCK_N2": 1, "BLOCK_K2": 256,
           "num_warps2": 1, "PDL": 1}  # the H200's M = 1 winner's shape: one split, w2 prefetched
ORN = {"M": 1, "N": 7168, "K": 1024, "eps": 1e-6}
ORN_CFG = {"BLOCK_M": 1, "BLOCK_N": 4, "BLOCK_K": 1024, "SPLIT_K": 1, "num_warps": 2, "PDL": 1, "NORM_BLOCK": 1024,
           "norm_warps": 4}  # the H100's M = 1 winner (session 23)


def kernels(ptx: str) -> list[list[str]]:
    """Each kernel's body (the text after its .entry), stripped lines, in the order compile_ptx joined them."""
    return [[ln.strip() for ln in part.splitlines()] for part in ptx.split(".entry")[1:]]


def vectors(rows: int, cols: int, warps: int) -> int:
    """16-byte loads a thread makes of a bf16 [rows, cols] tile spread over the CTA's threads."""
    return rows * cols * 2 // (16 * 32 * warps)


def test_every_link_takes_pdl_and_refuses_a_level_it_does_not_have() -> None:
    for stem, cfg, shp in (("router_fused", ROUTER_DOT, ROUTER), ("moe_experts_gemv", MOE_CFG, MOE),
                           ("oproj_residual_norm_gemv", ORN_CFG, ORN)):
        mod = load(stem)
        assert takes_pdl(mod), stem
        with pytest.raises(ValueError, match="pdl=5"):
            mod.build(cfg, shp, pdl=5)
        assert "griddepcontrol" not in mod.compile_ptx({**cfg, "PDL": 0}, shp, "sm_90a"), stem


def test_chained_oproj_fetches_only_its_first_w_step_before_the_wait_and_its_norm_lets_the_router_launch() -> None:
    mod = load("oproj_residual_norm_gemv")
    for cfg in (ORN_CFG, {**ORN_CFG, "PDL": 0}):  # the chain chains the norm whatever the config's PDL
        gemv, norm = kernels(mod.compile_ptx(cfg, ORN, "sm_90a", pdl=1))
        trigger, wait = first(gemv, "griddepcontrol.launch_dependents"), first(gemv, "griddepcontrol.wait")
        assert trigger < wait
        # the first (only) W step of the program's 4 rows x 1024 columns; not a, not the residual
        assert before(gemv, "ld.global", wait) == before(gemv, "ld.global.v4", wait) == vectors(4, 1024, 2) == 8
        assert first(norm, "griddepcontrol.launch_dependents") < first(norm, "ld.global") < first(
            norm, "griddepcontrol.wait")
        assert before(norm, "ld.global", first(norm, "griddepcontrol.wait")) == 1  # its slice of norm_weight


@pytest.mark.parametrize(("cfg", "w_vectors", "bias"), [
    (ROUTER_DOT, vectors(64, 256, 2), 0),   # the first 64 x 256 W tile; the epilogue launch loads the bias
    (ROUTER_FMA, vectors(16, 256, 4), 1),   # the first unrolled step; the one-launch form loads the bias up front
], ids=["dot-separate", "fma-fused"])
def test_chained_router_fetches_its_first_w_tile_before_the_wait(cfg: dict, w_vectors: int, bias: int) -> None:
    mod = load("router_fused")
    gemv, *epilogue = kernels(mod.compile_ptx(cfg, ROUTER, "sm_90a", pdl=1))
    trigger, wait = first(gemv, "griddepcontrol.launch_dependents"), first(gemv, "griddepcontrol.wait")
    assert trigger < wait
    assert before(gemv, "ld.global", wait) == w_vectors + bias
    assert before(gemv, "atom", wait) == before(gemv, "red", wait) == 0  # no add into the workspace before it
    if epilogue:  # separate: chained behind the GEMV (the config has no PDL) and lets w13 launch as it starts
        (epi,) = epilogue
        wait_e = first(epi, "griddepcontrol.wait")
        assert first(epi, "griddepcontrol.launch_dependents") < wait_e
        assert 0 < before(epi, "ld.global", wait_e) <= 4  # the bias (512 fp32 over 128 threads), not the logits


def test_chained_w13_reads_nothing_before_its_wait_and_lets_w2_launch_only_after_it() -> None:
    mod = load("moe_experts_gemv")
    for cfg in (MOE_CFG, {**MOE_CFG, "PDL": 0}):
        w13, w2 = kernels(mod.compile_ptx(cfg, MOE, "sm_90a", pdl=1))
        wait = first(w13, "griddepcontrol.wait")
        assert before(w13, "ld.global", wait) == 0
        assert wait < first(w13, "griddepcontrol.launch_dependents")
        # w2 as the config has it: PDL 1 prefetches its experts' rows (the ids first) before its wait
        assert ("griddepcontrol.wait" in "\n".join(w2)) == bool(cfg["PDL"])


def chained_equals_plain(stem: str, cfg: dict, shp: dict, make_args) -> None:
    """Off the GPU there are no grids to chain: build(..., pdl=1) runs the plain kernels, with the same answer."""
    mod = load(stem)
    outs = []
    for pdl in (0, 1):
        args, out_names = make_args(torch.Generator().manual_seed(7))
        mod.build(cfg, shp, pdl=pdl)(**args)
        outs.append([args[n] for n in out_names])
    assert all(torch.equal(a, b) for a, b in zip(*outs)), stem


def router_args(gen: torch.Generator):
    return {"x": torch.randn(2, 512, generator=gen).to(torch.bfloat16),
            "w": (torch.randn(32, 512, generator=gen) * 512 ** -0.5).to(torch.bfloat16),
            "bias": torch.randn(32, generator=gen) * 0.02, "topk_ids": torch.empty(2, 4, dtype=torch.int32),
            "topk_weights": torch.empty(2, 4, dtype=torch.float32)}, ("topk_ids", "topk_weights")


def moe_args(gen: torch.Generator):
    ids = torch.stack([torch.randperm(16, generator=gen)[:4] for _ in range(2)]).to(torch.int32)
    return {"x": torch.randn(2, 256, generator=gen).to(torch.bfloat16),
            "w13": (torch.randn(16, 128, 256, generator=gen) * 256 ** -0.5).to(torch.bfloat16),
            "w2": (torch.randn(16, 256, 64, generator=gen) * 64 ** -0.5).to(torch.bfloat16),
            "topk_ids": ids, "topk_weights": torch.rand(2, 4, generator=gen),
            "out": torch.empty(2, 256, dtype=torch.bfloat16)}, ("out",)


def orn_args(gen: torch.Generator):
    return {"a": torch.randn(1, 128, generator=gen).to(torch.bfloat16),
            "w": (torch.randn(256, 128, generator=gen) * 128 ** -0.5).to(torch.bfloat16),
            "residual": torch.randn(1, 256, generator=gen).to(torch.bfloat16),
            "norm_weight": torch.rand(256, generator=gen).to(torch.bfloat16),
            "out": torch.empty(1, 256, dtype=torch.bfloat16), "residual_out": torch.empty(1, 256, dtype=torch.bfloat16)
            }, ("out", "residual_out")


def block_chain_path() -> None:
    """moe_block's tuned_chain_after_norm, where the device is taken to chain (here the chained builds are the plain
    kernels): it writes its own ids, weights and output, and they equal tuned_side_after_norm's."""
    import moe_block
    from test_moe_block import GEMV_AT_1

    moe_block.device_chains = lambda device: True
    spec, dev = moe_block.SPECS["tiny"], torch.device("cpu")
    weights = moe_block.make_weights(spec, dev, torch.Generator(device=dev).manual_seed(0))
    paths, buf, files, *_ = moe_block.build_paths(spec, 1, weights, GEMV_AT_1, dev, after_norm=True)
    assert files["chained"] == {"router": True, "moe_experts": True}
    buf["h"].copy_(torch.randn(buf["h"].shape, generator=torch.Generator().manual_seed(3)).to(buf["h"].dtype))
    paths["tuned_side_after_norm"]()
    paths["tuned_chain_after_norm"]()
    assert torch.equal(buf["ids_chain"], buf["ids"]) and torch.equal(buf["wts_chain"], buf["wts"])
    assert torch.equal(buf["out_chain"], buf["out_side"]) and torch.isfinite(buf["out_chain"].float()).all()
    # the shared-fused block's chain (its configs are in GEMV_AT_1 too): the same as its plain path
    assert files["shared_fused"]["chained"] is True
    paths["tuned_shared_fused_after_norm"]()
    paths["tuned_shared_fused_chain_after_norm"]()
    assert torch.equal(buf["ids_sfc"], buf["ids_sf"]) and torch.equal(buf["out_sfc"], buf["out_sf"])


CASES = {
    "router": ("router_fused", {**ROUTER_DOT, "BLOCK_E": 16, "BLOCK_K": 128, "SPLIT_K": 4},
               {**ROUTER, "E": 32, "K": 512, "top_k": 4, "M": 2}, router_args),
    "moe_experts": ("moe_experts_gemv", {"BLOCK_N": 4, "BLOCK_K": 64, "SPLIT_K": 2, "num_warps": 1, "BLOCK_N2": 2,
                                         "BLOCK_K2": 64, "num_warps2": 1, "PDL": 1},
                    {"M": 2, "K": 256, "I": 64, "top_k": 4, "E": 16}, moe_args),
    "oproj_residual_norm": ("oproj_residual_norm_gemv", {"BLOCK_M": 1, "BLOCK_N": 8, "BLOCK_K": 64, "SPLIT_K": 2,
                                                         "num_warps": 1, "PDL": 0, "NORM_BLOCK": 128,
                                                         "norm_warps": 1},
                            {"M": 1, "N": 256, "K": 128, "eps": 1e-6}, orn_args),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_off_the_gpu_the_chained_build_is_the_plain_kernels(interpreted, case: str) -> None:
    assert interpreted[case] == "ok", interpreted[case]


def test_the_moe_block_chain_path_writes_its_own_outputs(interpreted) -> None:
    assert interpreted["moe_block"] == "ok", interpreted["moe_block"]


if __name__ == "__main__":  # the child process: TRITON_INTERPRET=1 was set before triton's import
    from support.interpreted import run_cases

    run_cases({**{case: (chained_equals_plain, args) for case, args in CASES.items()},
               "moe_block": (block_chain_path, ())})
