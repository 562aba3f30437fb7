"""dense_gemm_swapab (kernels/variants/triton/dense_gemm_swapab.py) on the CPU, no GPU needed:

- correctness under the Triton interpreter against an fp32 torch reference (M = 1..64, pointer and tensor-
  descriptor loads, split-K 1 and > 1, ragged N and K), each built kernel called three times in a row: the
  arrival counters must be back at zero after every call, and the split-order sum makes repeats bit-identical;
- ahead-of-time sm_90a PTX for the K2 TP8 shapes holding what claims() says: wgmma with the batch as its N,
  the bulk tensor copy for LOAD = "tma", no local-memory spills;
- the config space and its constraints (one BLOCK_M per M, whole 64-row warp-group tiles);
- a real run through workers.sandbox.evaluate (compile, check, bench) for each load path: passed.
The interpreted checks run in one child process started with TRITON_INTERPRET=1 (support.interpreted).
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re

import pytest
import torch
from support.dense_calls import check_repeated_calls
from support.interpreted import run_cases

ROOT = pathlib.Path(__file__).resolve().parents[1]
VARIANT = ROOT / "kernels" / "variants" / "triton" / "dense_gemm_swapab.py"


def load():
    spec = importlib.util.spec_from_file_location("_triton_variant_dense_gemm_swapab", VARIANT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def block_m(m: int) -> int:
    return max(16, 1 << (m - 1).bit_length())


# --- interpreted correctness (child process) -------------------------------------------------------

def check_case(config: dict, ms: tuple[int, ...], n: int, k: int) -> None:
    mod = load()
    for m in ms:
        cfg = {"BLOCK_M": block_m(m), **config}
        check_repeated_calls(mod.build(cfg, dict(M=m, N=n, K=k)), m, n, k, f"M={m} {cfg}")


# Small shapes; BLOCK_K 32 is outside CONFIG_SPACE, which build() does not check (only CONSTRAINTS), and lets
# several K steps and splits happen at these sizes.
CASES = {
    # one split, 4 K steps, pointer loads: out^T stored straight from the accumulator
    "ptr-split1": (dict(BLOCK_N=64, BLOCK_K=32, SPLIT_K=1, num_warps=4, num_stages=3, LOAD="ptr"), (1, 5, 16), 128, 128),
    # the same through the tensor descriptor
    "tma-split1": (dict(BLOCK_N=64, BLOCK_K=32, SPLIT_K=1, num_warps=4, num_stages=3, LOAD="tma"), (1, 5, 16), 128, 128),
    # N = 100: the second 64-row tile is ragged (pointer rows clamped, descriptor rows zero-filled); 3 splits
    "ptr-split3-ragged-n": (dict(BLOCK_N=64, BLOCK_K=32, SPLIT_K=3, num_warps=4, num_stages=2, LOAD="ptr"), (2, 17, 33), 100, 192),
    "tma-split3-ragged-n": (dict(BLOCK_N=64, BLOCK_K=32, SPLIT_K=3, num_warps=4, num_stages=2, LOAD="tma"), (2, 17, 33), 100, 192),
    # K = 200 splits 2 ways into whole 32-steps of 128 and a masked tail: x's zeros cancel what W reads past K
    "tma-split2-ragged-k": (dict(BLOCK_N=64, BLOCK_K=32, SPLIT_K=2, num_warps=4, num_stages=2, LOAD="tma"), (1, 4), 64, 200),
    "ptr-split2-ragged-k": (dict(BLOCK_N=64, BLOCK_K=32, SPLIT_K=2, num_warps=4, num_stages=2, LOAD="ptr"), (1, 4), 64, 200),
    # a 128-row tile over 8 warps (two warp groups), M = 64
    "tma-128rows-m64": (dict(BLOCK_N=128, BLOCK_K=32, SPLIT_K=2, num_warps=8, num_stages=2, LOAD="tma"), (64,), 128, 128),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_interpreted_matches_fp32_torch_on_repeated_calls(interpreted, case):
    assert interpreted[case] == "ok", interpreted[case]


# --- the config space -------------------------------------------------------------------------------

K2 = {"fused_qkv_a": (2112, 7168), "q_b_proj": (1536, 1536), "o_proj": (7168, 1024), "lm_head": (20480, 7168)}


def test_space_covers_m_1_to_64_with_one_block_m_each():
    from support.spaces import submitted_space

    mod = load()
    space = submitted_space(VARIANT)
    assert space.size() == 2700
    for name, (n, k) in K2.items():
        for m in (1, 2, 3, 4, 8, 16, 17, 32, 33, 64):
            points = list(space.points(dict(M=m, N=n, K=k)))
            assert points, (name, m)
            assert {p["BLOCK_M"] for p in points} == {block_m(m)}, (name, m)
            # each warp group owns >= 64 W rows (wgmma), and the pipeline fits shared memory
            assert all(p["BLOCK_N"] >= 16 * p["num_warps"] for p in points)
            assert all(p["num_stages"] * (p["BLOCK_M"] + p["BLOCK_N"]) * p["BLOCK_K"] * 2 <= 196608 for p in points)
        assert space.count(dict(M=65, N=n, K=k)) == 0, name
        assert space.is_valid(mod.DEFAULT, dict(M=4, N=n, K=k)), name


def test_build_rejects_bad_configs():
    mod = load()
    with pytest.raises(ValueError, match="BLOCK_M >= M"):
        mod.build({"BLOCK_M": 16}, dict(M=17, N=1536, K=1536))
    with pytest.raises(ValueError, match="BLOCK_N >= 16 \\* num_warps"):
        mod.build({"BLOCK_N": 64, "num_warps": 8}, dict(M=1, N=1536, K=1536))
    with pytest.raises(ValueError, match="LOAD must be one of"):
        mod.build({"LOAD": "tma2"}, dict(M=1, N=1536, K=1536))
    fn = mod.build({}, dict(M=4, N=1536, K=1536))
    with pytest.raises(ValueError, match="built M=4"):
        fn(torch.zeros(2, 1536, dtype=torch.bfloat16), torch.zeros(1536, 1536, dtype=torch.bfloat16),
           torch.zeros(2, 1536, dtype=torch.bfloat16))


# --- ahead-of-time PTX for the K2 TP8 shapes ----------------------------------------------------------

needs_compiler = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                                    reason="AOT compile needs the real triton.jit (TRITON_INTERPRET is set)")

PTX_CONFIGS = {
    "m4-ptr-split2": (4, dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, SPLIT_K=2, num_warps=4, num_stages=4, LOAD="ptr")),
    "m16-tma-split4": (16, dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, SPLIT_K=4, num_warps=4, num_stages=4, LOAD="tma")),
    "m64-tma-split1-8warps": (64, dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, SPLIT_K=1, num_warps=8, num_stages=3,
                                       LOAD="tma")),
}


@needs_compiler
@pytest.mark.parametrize("cfg_name", sorted(PTX_CONFIGS))
@pytest.mark.parametrize("shape_name", ["o_proj", "fused_qkv_a"])
def test_compile_ptx_sm90a_holds_the_claims(shape_name, cfg_name):
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    mod = load()
    (n, k), (m, config) = K2[shape_name], PTX_CONFIGS[cfg_name]
    shape = dict(M=m, N=n, K=k)
    ptx = mod.compile_ptx(config, shape, "sm_90a")
    assert ".target sm_90a" in ptx and ptx.count(".entry") == 1
    for needle in mod.claims(config, shape)["ptx_contains"]:
        assert needle in ptx, needle
    # the batch is the MMA's N: m64 n<BLOCK_M / warp groups along it> k16, never mma.sync
    shapes = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m(\d+)n(\d+)k16", ptx))
    assert shapes and all(mm == "64" for mm, _ in shapes), shapes
    assert "mma.sync" not in ptx
    assert ("cp.async.bulk.tensor" in ptx) == (config["LOAD"] == "tma")
    assert ("atom.global.gpu.acq_rel.add" in ptx) == (config["SPLIT_K"] > 1)
    assert ".local" not in ptx


# --- through the real pipeline (sandboxed child, interpreter on the CPU) --------------------------------

@pytest.mark.parametrize("m,config", [
    (3, dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=64, SPLIT_K=2, num_warps=4, num_stages=2, LOAD="tma")),
    (20, dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=128, SPLIT_K=1, num_warps=4, num_stages=2, LOAD="ptr")),
])
def test_pipeline_evaluate_passes(data_dir, m, config):
    from evaluation_helpers import INTERPRETED_BENCH, run_source
    from kernels.slots.base import Shape
    from workers.protocol import Verdict

    result = run_source(VARIANT.read_text(), data_dir, language="triton", m=m, config=config, device="cpu",
                        shape=Shape("dense_gemm", "t", {"N": 128, "K": 512}), seed=11, timeout_s=300,
                        bench=INTERPRETED_BENCH)
    assert result.verdict == Verdict.passed, (result.reason_code, result.reason, result.compile and result.compile.log)
    assert result.check.passed and result.bench.median_us > 0
    assert not result.uses_library


if __name__ == "__main__":  # the child process: TRITON_INTERPRET=1 was set before triton's import
    run_cases({case: (check_case, args) for case, args in CASES.items()})
