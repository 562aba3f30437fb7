"""dense_gemm_gemv (kernels/variants/triton/dense_gemm_gemv.py) on the CPU, no GPU needed:

- correctness under the Triton interpreter against an fp32 torch reference (M = 1..16, split-K 1 and > 1,
  ragged N and K), each built kernel called several times in a row: the split-K arrival counters must
  be back at zero after every call or the next call leaves its outputs unwritten;
- ahead-of-time sm_90a PTX for the K2 TP8 shapes at M = 1 and 16, holding what claims() says;
- the config space and its constraints (one BLOCK_M per M, nothing above M = 16);
- a real run through workers.sandbox.evaluate (compile with AOT PTX + claims, check, bench): passed.

As in test_triton_slot_kernels.py, the interpreted checks run in ONE child process started with
TRITON_INTERPRET=1 (this file executed as a script), since the interpreter must be chosen before triton
is first imported; the AOT compile tests run in-process with the interpreter off.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib

import pytest
from support.dense_calls import check_repeated_calls
from support.interpreted import run_cases

ROOT = pathlib.Path(__file__).resolve().parents[1]
VARIANT = ROOT / "kernels" / "variants" / "triton" / "dense_gemm_gemv.py"
H200_SMS = 132


def load():
    spec = importlib.util.spec_from_file_location("_triton_variant_dense_gemm_gemv", VARIANT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def next_pow2(m: int) -> int:
    return 1 << (m - 1).bit_length()


# --- interpreted correctness (child process) -------------------------------------------------------

def check_case(config: dict, ms: tuple[int, ...], n: int, k: int) -> None:
    mod = load()
    for m in ms:
        cfg = {"BLOCK_M": next_pow2(m), **config}
        check_repeated_calls(mod.build(cfg, dict(M=m, N=n, K=k, slot="dense_gemm", name="t", dtype="bfloat16")), m, n, k, f"M={m} {cfg}")


MS = (1, 2, 3, 5, 8, 16)
# Small-shape configs; values outside CONFIG_SPACE (BLOCK_K 32/64) are fine for build(), which checks
# only CONSTRAINTS, and let split-K and ragged tails happen at these sizes.
CASES = {
    # EVEN_K, SPLIT_K = 1: bf16 stored straight from the accumulator.
    "split1": (dict(BLOCK_N=4, BLOCK_K=128, SPLIT_K=1, num_warps=2, num_stages=2), MS, 48, 256),
    # EVEN_K, 2 splits of one step: workspace + counter, the last arrival reduces.
    "split2": (dict(BLOCK_N=4, BLOCK_K=128, SPLIT_K=2, num_warps=2, num_stages=2), MS, 48, 256),
    # 7 K steps over 4 splits (1 + 2 + 2 + 2): uneven step counts per split, still unmasked.
    "split4-uneven-steps": (dict(BLOCK_N=4, BLOCK_K=64, SPLIT_K=4, num_warps=1, num_stages=3), (1, 3, 16), 24, 448),
    # N = 40 is not a multiple of BLOCK_N (clamped rows), K = 200 not of BLOCK_K (masked tail step).
    "split3-ragged": (dict(BLOCK_N=8, BLOCK_K=32, SPLIT_K=3, num_warps=1, num_stages=2), MS, 40, 200),
    "split1-ragged": (dict(BLOCK_N=4, BLOCK_K=64, SPLIT_K=1, num_warps=1, num_stages=1), (1, 3, 16), 40, 200),
    # 16 splits of one step each; the second N tile is half outside N.
    "split16": (dict(BLOCK_N=16, BLOCK_K=32, SPLIT_K=16, num_warps=1, num_stages=2), (1, 4), 24, 512),
    # num_stages 0: the K range unrolled at compile time, all loads up front (4 steps in one split; 2 x 2
    # split; ragged N with clamped rows).
    "unrolled-split1": (dict(BLOCK_N=4, BLOCK_K=64, SPLIT_K=1, num_warps=1, num_stages=0), (1, 2, 3, 5, 8), 48, 256),
    "unrolled-split2": (dict(BLOCK_N=8, BLOCK_K=64, SPLIT_K=2, num_warps=2, num_stages=0), (1, 3, 8), 40, 256),
    # 7 splits of 2 unrolled steps (14 = 7168 / 512 at fused_qkv_a's scale): a split count that is no power of 2
    "unrolled-split7": (dict(BLOCK_N=8, BLOCK_K=32, SPLIT_K=7, num_warps=1, num_stages=0), (1, 3), 40, 448),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_interpreted_matches_fp32_torch_on_repeated_calls(interpreted, case):
    assert interpreted[case] == "ok", interpreted[case]


# --- the config space -------------------------------------------------------------------------------

K2 = {"fused_qkv_a": (2112, 7168), "q_b_proj": (1536, 1536), "o_proj": (7168, 1024), "lm_head": (20480, 7168)}


def test_space_fits_the_api_cap_and_covers_m_1_to_16_only():
    from support.spaces import submitted_space

    mod = load()
    space = submitted_space(VARIANT)
    assert space.size() == 20000
    for name, (n, k) in K2.items():
        for m in range(1, 17):
            points = list(space.points(dict(M=m, N=n, K=k)))
            assert points, (name, m)
            assert {p["BLOCK_M"] for p in points} == {next_pow2(m)}, (name, m)  # exactly one BLOCK_M per M
        for m in (17, 32, 64):
            assert space.count(dict(M=m, N=n, K=k)) == 0, (name, m)  # the tensor-core kernel's range
        assert space.is_valid(mod.DEFAULT, dict(M=1, N=n, K=k)), name
    n_qb = K2["q_b_proj"][0]
    assert -(-n_qb // mod.DEFAULT["BLOCK_N"]) * mod.DEFAULT["SPLIT_K"] >= H200_SMS  # DEFAULT fills the SMs


def test_build_rejects_large_m_and_bad_configs():
    mod = load()
    with pytest.raises(ValueError, match="M <= 16"):
        mod.build({"BLOCK_M": 32}, dict(M=32, N=1536, K=1536))
    with pytest.raises(ValueError, match="BLOCK_M >= M"):
        mod.build({}, dict(M=2, N=1536, K=1536))  # DEFAULT is M = 1's
    with pytest.raises(ValueError, match="BLOCK_K \\* SPLIT_K <= K"):
        mod.build({"BLOCK_K": 1024, "SPLIT_K": 2}, dict(M=1, N=1536, K=1536))
    # unrolled: splits of whole, equal step counts (1536 = 3 steps of 512: not 2 splits) and bounded loads
    with pytest.raises(ValueError, match="num_stages > 0 or \\(K % BLOCK_K"):
        mod.build({"BLOCK_K": 512, "SPLIT_K": 2, "num_stages": 0}, dict(M=1, N=1536, K=1536))
    with pytest.raises(ValueError, match="num_stages > 0 or \\(K // SPLIT_K\\) \\* \\(BLOCK_M \\+ BLOCK_N\\)"):
        mod.build({"BLOCK_N": 32, "BLOCK_K": 512, "SPLIT_K": 1, "num_warps": 4, "num_stages": 0},
                  dict(M=1, N=2112, K=7168))
    with pytest.raises(ValueError, match="num_stages > 0 or BLOCK_M \\* BLOCK_N \\* BLOCK_K <= 2048"):
        mod.build({"BLOCK_M": 16, "BLOCK_N": 4, "BLOCK_K": 128, "SPLIT_K": 4, "num_warps": 2, "num_stages": 0},
                  dict(M=16, N=1536, K=1536))


# --- ahead-of-time PTX for the K2 TP8 shapes ----------------------------------------------------------

needs_compiler = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                                    reason="AOT compile needs the real triton.jit (TRITON_INTERPRET is set)")

PTX_CONFIGS = {
    "m1-default": (1, {}),  # SPLIT_K 2, num_stages 3
    "m1-split1": (1, dict(BLOCK_M=1, BLOCK_N=32, BLOCK_K=512, SPLIT_K=1, num_warps=4, num_stages=4)),
    "m1-split4-stages1": (1, dict(BLOCK_M=1, BLOCK_N=8, BLOCK_K=256, SPLIT_K=4, num_warps=2, num_stages=1)),
    "m16-split1": (16, dict(BLOCK_M=16, BLOCK_N=4, BLOCK_K=128, SPLIT_K=1, num_warps=2, num_stages=3)),
    "m16-split4": (16, dict(BLOCK_M=16, BLOCK_N=8, BLOCK_K=128, SPLIT_K=4, num_warps=4, num_stages=2)),
    "m1-unrolled-split4": (1, dict(BLOCK_M=1, BLOCK_N=8, BLOCK_K=128, SPLIT_K=4, num_warps=4, num_stages=0)),
}


@needs_compiler
@pytest.mark.parametrize("cfg_name", sorted(PTX_CONFIGS))
@pytest.mark.parametrize("shape_name", sorted(K2))
def test_compile_ptx_sm90a_holds_the_claims(shape_name, cfg_name):
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    mod = load()
    (n, k), (m, config) = K2[shape_name], PTX_CONFIGS[cfg_name]
    shape = dict(M=m, N=n, K=k, slot="dense_gemm", name=shape_name, dtype="bfloat16")
    ptx = mod.compile_ptx(config, shape, "sm_90a")
    assert ".target sm_90a" in ptx
    claimed = mod.claims(config, shape)["ptx_contains"]
    split = {**mod.DEFAULT, **config}["SPLIT_K"]
    assert len(claimed) == (2 if split > 1 else 1)
    for needle in claimed:
        assert needle in ptx, needle
    # 16-byte W loads: every L2-only cp.async copies 0x10 bytes when pipelined, else 128-bit vector loads
    copies = [ln for ln in ptx.splitlines() if "cp.async.cg.shared.global" in ln]
    stages = config.get("num_stages", mod.DEFAULT["num_stages"])
    if stages > 1:
        assert copies and all(", 0x10," in ln for ln in copies), copies[:3]
    else:
        assert not copies and "ld.global.v4.b32" in ptx
    if stages == 0:
        # straight-line K: no loop back-edge before the split-K epilogue, and all of a program's W (its
        # BLOCK_N x K/SPLIT_K bf16, 16 bytes a load) loaded by 16-byte vector loads
        lines = ptx.splitlines()
        loads = [ln for ln in lines if "ld.global.v4.b32" in ln]
        threads = 32 * config["num_warps"]
        w_loads = n_w = config["BLOCK_N"] * (k // config["SPLIT_K"]) * 2 // 16 // threads
        assert len(loads) >= w_loads > 0, (len(loads), n_w)
    # one launch, CUDA cores only; the arrival counter and .cg partial reads exactly when split
    assert ptx.count(".entry") == 1
    assert "mma" not in ptx
    assert ("atom.global.gpu.acq_rel.add" in ptx) == (split > 1)
    assert ("ld.global.cg" in ptx) == (split > 1)
    assert ".local" not in ptx
    if split > 1:
        # The counter protocol leans on CTA barriers around the one thread's atomic: every thread's
        # partial store, bar.sync, release; acquire, bar.sync, every thread's .cg read of the partials.
        atom = ptx.index("atom.global.gpu.acq_rel.add")
        last_store = ptx.rindex("st.global", 0, atom)
        first_read = ptx.index("ld.global.cg", atom)
        assert "bar.sync" in ptx[last_store:atom] and "bar.sync" in ptx[atom:first_read]
        assert "atom.global.gpu.relaxed.exch" in ptx[first_read:]  # the reset, after the reads


# --- through the real pipeline (sandboxed child, interpreter on the CPU) --------------------------------

@pytest.mark.parametrize("m,config", [
    (1, {}),  # DEFAULT: 2 splits
    (3, dict(BLOCK_M=4, BLOCK_N=8, BLOCK_K=128, SPLIT_K=4, num_warps=2, num_stages=2)),
    (2, dict(BLOCK_M=2, BLOCK_N=4, BLOCK_K=128, SPLIT_K=2, num_warps=2, num_stages=0)),  # unrolled
])
def test_pipeline_evaluate_passes(data_dir, m, config):
    from evaluation_helpers import INTERPRETED_BENCH, run_source
    from kernels.slots.base import Shape
    from workers.protocol import Verdict

    result = run_source(VARIANT.read_text(), data_dir, language="triton", m=m, config=config, device="cpu",
                        shape=Shape("dense_gemm", "t", {"N": 64, "K": 512}), seed=11, timeout_s=300,
                        bench=INTERPRETED_BENCH)
    assert result.verdict == Verdict.passed, (result.reason_code, result.reason, result.compile and result.compile.log)
    assert result.check.passed and result.bench.median_us > 0
    assert not result.uses_library


if __name__ == "__main__":  # the child process: TRITON_INTERPRET=1 was set before triton's import
    run_cases({case: (check_case, args) for case, args in CASES.items()})
