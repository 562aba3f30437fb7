"""oproj_residual_norm_gemv (kernels/variants/triton/oproj_residual_norm_gemv.py) on the CPU, no GPU needed:

- correctness under the Triton interpreter against an fp64 reference at M = 1..8, split-K 1 and > 1, N not a
  multiple of BLOCK_N or NORM_BLOCK, each built kernel called three times: the split-K counters must be back at
  zero after every call, and the same inputs must give bit-identical outputs (partials summed in split order);
- the config space: K2 TP8's shape has configs at M = 1..8 only, and the default fills the H200's SMs;
- ahead-of-time sm_90a PTX for K2 TP8: two launches, CUDA cores only, the claims hold, norm_weight read before
  griddepcontrol.wait with PDL, no local-memory spills;
- a real run through the sandboxed pipeline (compile with AOT PTX + claims, check, bench): passed.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib

import pytest
import torch
from support.interpreted import run_cases

ROOT = pathlib.Path(__file__).resolve().parents[1]
VARIANT = ROOT / "kernels" / "variants" / "triton" / "oproj_residual_norm_gemv.py"
H200_SMS = 132
K2_TP8 = dict(N=7168, K=1024, eps=1e-6)


def load():
    spec = importlib.util.spec_from_file_location("_triton_variant_oproj_residual_norm_gemv", VARIANT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def next_pow2(m: int) -> int:
    return 1 << (m - 1).bit_length()


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


# --- interpreted correctness (child process) -------------------------------------------------------

def check_case(config: dict, ms: tuple[int, ...], n: int, k: int) -> None:
    mod = load()
    eps = 1e-6
    for m in ms:
        cfg = {"BLOCK_M": next_pow2(m), **config}
        fn = mod.build(cfg, dict(M=m, N=n, K=k, eps=eps))
        prev = None
        for trial in range(3):
            if trial < 2:  # fresh inputs; the third call repeats the second's
                g = torch.Generator().manual_seed(100 * m + trial)
                a = torch.randn((m, k), generator=g).bfloat16()
                w = (torch.randn((n, k), generator=g) / k ** 0.5).bfloat16()
                res = torch.randn((m, n), generator=g).bfloat16()
                nw = (0.5 + torch.rand(n, generator=g)).bfloat16()
            before = [t.clone() for t in (a, w, res, nw)]
            # every element must be written: NaN where it is not
            out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
            res_out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
            fn(a=a, w=w, residual=res, norm_weight=nw, out=out, residual_out=res_out)
            assert all(torch.equal(x, y) for x, y in zip((a, w, res, nw), before)), "an input was written"
            assert torch.isfinite(out).all() and torch.isfinite(res_out).all(), (m, cfg, trial, "unwritten")
            r = a.double() @ w.double().t() + res.double()
            normed = r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + eps) * nw.double()
            assert rel_l2(res_out, r) < 1e-2, (m, cfg, rel_l2(res_out, r))
            assert rel_l2(out, normed) < 1e-2, (m, cfg, rel_l2(out, normed))
            if trial == 1:
                assert not torch.equal(out, prev), "same output for new inputs"
            if trial == 2:
                assert torch.equal(out, prev), "not deterministic"
            prev = out.clone()


CASES = {
    # no split: 2 unrolled K steps; N = 200 is not a multiple of BLOCK_N 16 (clamped rows, masked stores) nor of
    # NORM_BLOCK 128 (PDL asked for: a CPU runs the plain pair)
    "split1-ragged-n": (dict(BLOCK_N=16, BLOCK_K=128, SPLIT_K=1, num_warps=4, NORM_BLOCK=128, norm_warps=1, PDL=1),
                        (1, 3), 200, 256),
    # 2 splits of 2 steps: workspace + counter, the last arrival adds the residual and writes the sums of squares
    "split2": (dict(BLOCK_N=8, BLOCK_K=64, SPLIT_K=2, num_warps=2, NORM_BLOCK=256, norm_warps=2),
               (1, 2, 4, 8), 256, 256),
    # 4 splits of one step, 4-row tiles (64 tiles: the norm sums 64 partials a row)
    "split4": (dict(BLOCK_N=4, BLOCK_K=64, SPLIT_K=4, num_warps=1, NORM_BLOCK=128, norm_warps=1),
               (1, 3), 256, 256),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_interpreted_matches_fp64_on_repeated_calls(interpreted, case):
    assert interpreted[case] == "ok", interpreted[case]


# --- the config space -------------------------------------------------------------------------------

def test_space_covers_m_1_to_8_only_and_default_fills_the_sms():
    from support.spaces import submitted_space

    mod = load()
    space = submitted_space(VARIANT)
    for m in (1, 2, 3, 4, 8):
        points = list(space.points(dict(M=m, **K2_TP8)))
        assert points, m
        assert {p["BLOCK_M"] for p in points} == {next_pow2(m)}, m
    for m in (16, 64):
        assert space.count(dict(M=m, **K2_TP8)) == 0, m
    d = mod.DEFAULT_CONFIG
    assert space.is_valid(d, dict(M=1, **K2_TP8))
    assert (K2_TP8["N"] // d["BLOCK_N"]) * d["SPLIT_K"] >= H200_SMS


def test_build_rejects_bad_configs():
    mod = load()
    with pytest.raises(ValueError, match="M <= 8"):
        mod.build({"BLOCK_M": 16}, dict(M=16, **K2_TP8))
    with pytest.raises(ValueError, match="BLOCK_M >= M"):
        mod.build({}, dict(M=2, **K2_TP8))
    with pytest.raises(ValueError, match=r"\(K // BLOCK_K\) % SPLIT_K"):
        mod.build({"BLOCK_K": 1024, "SPLIT_K": 2}, dict(M=1, **K2_TP8))
    with pytest.raises(ValueError, match=r"\(K // SPLIT_K\) \* \(BLOCK_M \+ BLOCK_N\)"):
        mod.build({"BLOCK_N": 16, "num_warps": 4}, dict(M=1, **K2_TP8))


def test_run_rejects_wrong_shapes():
    mod = load()
    fn = mod.build({"BLOCK_N": 8, "BLOCK_K": 64, "num_warps": 2, "NORM_BLOCK": 128, "norm_warps": 1},
                   dict(M=1, N=64, K=64, eps=1e-6))
    bf = torch.bfloat16
    with pytest.raises(ValueError, match="!= built M=1 N=64 K=64"):
        fn(a=torch.zeros(2, 64, dtype=bf), w=torch.zeros(64, 64, dtype=bf), residual=torch.zeros(2, 64, dtype=bf),
           norm_weight=torch.ones(64, dtype=bf), out=torch.empty(2, 64, dtype=bf),
           residual_out=torch.empty(2, 64, dtype=bf))


# --- ahead-of-time PTX for K2 TP8 ---------------------------------------------------------------------

needs_compiler = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                                    reason="AOT compile needs the real triton.jit (TRITON_INTERPRET is set)")

PTX_CONFIGS = {
    "m1-default": (1, {}),
    "m1-split2-pdl": (1, dict(BLOCK_N=8, BLOCK_K=512, SPLIT_K=2, num_warps=2, PDL=1)),
    "m4-split2-pdl": (4, dict(BLOCK_M=4, BLOCK_N=4, BLOCK_K=256, SPLIT_K=2, num_warps=4, PDL=1)),
    "m8-split4": (8, dict(BLOCK_M=8, BLOCK_N=4, BLOCK_K=128, SPLIT_K=4, num_warps=2, NORM_BLOCK=2048,
                          norm_warps=8)),
}


@needs_compiler
@pytest.mark.parametrize("cfg_name", sorted(PTX_CONFIGS))
def test_compile_ptx_sm90a_holds_the_claims(cfg_name):
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    mod = load()
    m, config = PTX_CONFIGS[cfg_name]
    shape = dict(M=m, **K2_TP8)
    ptx = mod.compile_ptx(config, shape, "sm_90a")
    assert ".target sm_90a" in ptx and ptx.count(".entry") == 2  # the GEMV, then the norm
    for needle in mod.claims(config, shape)["ptx_contains"]:
        assert needle in ptx, needle
    full = {**mod.DEFAULT_CONFIG, **config}
    assert ("atom.global.gpu.acq_rel.add" in ptx) == (full["SPLIT_K"] > 1)
    assert "mma" not in ptx and "cp.async" not in ptx
    gemv, norm = ptx.split(".entry")[1:]
    if full["PDL"]:
        assert "griddepcontrol.launch_dependents" in gemv and "griddepcontrol.wait" not in gemv
        # norm_weight is read before the wait; the sums of squares and residual_out after it
        before, after = norm.split("griddepcontrol.wait")
        assert before.count("ld.global") >= 1 and after.count("ld.global") >= 2
    else:
        assert "griddepcontrol" not in ptx
    assert ".local" not in ptx  # no register spills


# --- through the real pipeline (sandboxed child, interpreter on the CPU) --------------------------------

@pytest.mark.parametrize("m,config", [
    (1, dict(BLOCK_M=1, BLOCK_N=8, BLOCK_K=64, SPLIT_K=2, num_warps=2, NORM_BLOCK=128, norm_warps=1)),
    (3, dict(BLOCK_M=4, BLOCK_N=4, BLOCK_K=128, SPLIT_K=1, num_warps=2, NORM_BLOCK=256, norm_warps=2, PDL=1)),
])
def test_pipeline_evaluate_passes(data_dir, m, config):
    from evaluation_helpers import INTERPRETED_BENCH, run_source
    from kernels.slots.base import Shape
    from workers.protocol import Verdict

    result = run_source(VARIANT.read_text(), data_dir, language="triton", m=m, config=config, device="cpu",
                        shape=Shape("oproj_residual_norm", "t", {"N": 256, "K": 128, "eps": 1e-6}), seed=5,
                        timeout_s=300, bench=INTERPRETED_BENCH)
    assert result.verdict == Verdict.passed, (result.reason_code, result.reason, result.compile and result.compile.log)
    assert result.check.passed and result.bench.median_us > 0
    assert not result.uses_library


if __name__ == "__main__":  # the child process: TRITON_INTERPRET=1 was set before triton's import
    run_cases({case: (check_case, args) for case, args in CASES.items()})
