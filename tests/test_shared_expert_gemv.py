"""shared_expert_gemv (kernels/variants/triton/shared_expert_gemv.py) on the CPU, no GPU needed:

- correctness under the Triton interpreter against an fp32 torch reference (h rounded to bf16 as the
  kernel and vLLM do) at M = 1..4, split-K 1 and > 1, ragged down-projection tiles, each built kernel
  called three times: the split-K counters must be back at zero after every call (or the next call
  leaves h stale), and the same inputs must give bit-identical outputs (partials summed in split order);
- the config space: K2 TP8's shape has configs at M = 1..4 only, DEFAULT fills the H200's SMs;
- ahead-of-time sm_90a PTX for K2 TP8 at M = 1 and 4: two launches, CUDA cores only, the claims hold,
  no local-memory spills;
- a real run through workers.sandbox.evaluate (compile with AOT PTX + claims, check, bench): passed.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib

import pytest
import torch
from support.interpreted import run_cases

ROOT = pathlib.Path(__file__).resolve().parents[1]
VARIANT = ROOT / "kernels" / "variants" / "triton" / "shared_expert_gemv.py"
H200_SMS = 132
K2_TP8 = dict(K=7168, I=256)


def load():
    spec = importlib.util.spec_from_file_location("_triton_variant_shared_expert_gemv", VARIANT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def next_pow2(m: int) -> int:
    return 1 << (m - 1).bit_length()


def reference(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    gate, up = (x.float() @ w13.float().t()).chunk(2, dim=-1)
    h = (torch.nn.functional.silu(gate) * up).bfloat16()
    return h.float() @ w2.float().t()


# --- interpreted correctness (child process) -------------------------------------------------------

def check_case(config: dict, ms: tuple[int, ...], k: int, i: int) -> None:
    mod = load()
    for m in ms:
        cfg = {"BLOCK_M": next_pow2(m), **config}
        fn = mod.build(cfg, dict(M=m, K=k, I=i, slot="shared_expert", name="t", dtype="bfloat16"))
        prev = None
        for trial in range(3):
            if trial < 2:  # fresh inputs; the third call repeats the second's
                g = torch.Generator().manual_seed(100 * m + trial)
                x = torch.randn((m, k), generator=g).bfloat16()
                w13 = (torch.randn((2 * i, k), generator=g) / k ** 0.5).bfloat16()
                w2 = (torch.randn((k, i), generator=g) / i ** 0.5).bfloat16()
            before = [t.clone() for t in (x, w13, w2)]
            out = torch.full((m, k), float("nan"), dtype=torch.bfloat16)  # every element must be written
            fn(x=x, w13=w13, w2=w2, out=out)
            assert all(torch.equal(a, b) for a, b in zip((x, w13, w2), before)), "an input was written"
            assert torch.isfinite(out).all(), (m, cfg, trial, "unwritten (NaN) outputs")
            torch.testing.assert_close(out.float(), reference(x, w13, w2), rtol=2e-2, atol=2e-2,
                                       msg=lambda s: f"M={m} {cfg}: {s}")
            if trial == 1:
                assert not torch.equal(out, prev), "same output for new inputs"
            if trial == 2:
                assert torch.equal(out, prev), "not deterministic"
            prev = out.clone()


CASES = {
    # no split: 4 unrolled K steps, h written straight from the sums (PDL asked for: a CPU runs the plain pair)
    "split1": (dict(BLOCK_N=4, BLOCK_K=128, SPLIT_K=1, num_warps=2, BLOCK_N2=8, BLOCK_K2=32, num_warps2=1, PDL=1),
               (1, 2, 3, 4), 512, 32),
    # 7 splits of one step (hidden 448 = 7 x 64): workspace + counter, the last arrival applies silu*mul;
    # the down projection's 128-row tiles overhang K = 448 (clamped rows, masked stores)
    "split7-ragged-down": (dict(BLOCK_N=8, BLOCK_K=64, SPLIT_K=7, num_warps=2, BLOCK_N2=128, BLOCK_K2=16,
                                num_warps2=4), (1, 2, 3, 4), 448, 32),
    # 4 splits of 2 steps, 4 N tiles; the down projection in 2 unrolled K steps
    "split4-two-steps": (dict(BLOCK_N=16, BLOCK_K=64, SPLIT_K=4, num_warps=4, BLOCK_N2=16, BLOCK_K2=32,
                              num_warps2=2), (1, 3, 4), 512, 64),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_interpreted_matches_fp32_torch_on_repeated_calls(interpreted, case):
    assert interpreted[case] == "ok", interpreted[case]


# --- the config space -------------------------------------------------------------------------------

def test_space_covers_m_1_to_4_only_and_default_fills_the_sms():
    from support.spaces import submitted_space

    mod = load()
    space = submitted_space(VARIANT)
    for m in range(1, 5):
        points = list(space.points(dict(M=m, **K2_TP8)))
        assert points, m
        assert {p["BLOCK_M"] for p in points} == {next_pow2(m)}, m
    for m in (8, 16, 64):
        assert space.count(dict(M=m, **K2_TP8)) == 0, m
    assert space.is_valid(mod.DEFAULT, dict(M=1, **K2_TP8))
    d = mod.DEFAULT
    assert (K2_TP8["I"] // d["BLOCK_N"]) * d["SPLIT_K"] >= H200_SMS
    assert K2_TP8["K"] // d["BLOCK_N2"] >= H200_SMS


def test_build_rejects_bad_configs():
    mod = load()
    with pytest.raises(ValueError, match="M <= 4"):
        mod.build({"BLOCK_M": 8}, dict(M=8, **K2_TP8))
    with pytest.raises(ValueError, match="BLOCK_M >= M"):
        mod.build({}, dict(M=2, **K2_TP8))
    with pytest.raises(ValueError, match=r"\(K // BLOCK_K\) % SPLIT_K"):
        mod.build({"BLOCK_K": 1024, "SPLIT_K": 14}, dict(M=1, **K2_TP8))
    with pytest.raises(ValueError, match="2 \\* BLOCK_M \\* BLOCK_N \\* BLOCK_K <= 2048"):
        mod.build({"BLOCK_M": 4, "BLOCK_N": 8, "BLOCK_K": 256, "SPLIT_K": 14, "num_warps": 4}, dict(M=4, **K2_TP8))
    with pytest.raises(ValueError, match="PDL == 0 or BLOCK_K2 == I"):
        mod.build({"BLOCK_K2": 128, "PDL": 1}, dict(M=1, **K2_TP8))


# --- ahead-of-time PTX for K2 TP8 ---------------------------------------------------------------------

needs_compiler = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                                    reason="AOT compile needs the real triton.jit (TRITON_INTERPRET is set)")

PTX_CONFIGS = {
    "m1-default": (1, {}),
    "m1-split7": (1, dict(BLOCK_M=1, BLOCK_N=8, BLOCK_K=512, SPLIT_K=7, num_warps=8, BLOCK_N2=16, BLOCK_K2=256,
                          num_warps2=2)),
    "m4-split14": (4, dict(BLOCK_M=4, BLOCK_N=8, BLOCK_K=256, SPLIT_K=14, num_warps=8, BLOCK_N2=16, BLOCK_K2=128,
                           num_warps2=8)),
    # w2 prefetched before griddepcontrol.wait (programmatic dependent launch of the down kernel)
    "m1-pdl": (1, dict(BLOCK_M=1, BLOCK_N=4, BLOCK_K=512, SPLIT_K=14, num_warps=2, BLOCK_N2=16, BLOCK_K2=256,
                       num_warps2=2, PDL=1)),
    "m2-split14": (2, dict(BLOCK_M=2, BLOCK_N=8, BLOCK_K=512, SPLIT_K=14, num_warps=8, BLOCK_N2=32, BLOCK_K2=256,
                           num_warps2=8)),
}


@needs_compiler
@pytest.mark.parametrize("cfg_name", sorted(PTX_CONFIGS))
def test_compile_ptx_sm90a_holds_the_claims(cfg_name):
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    mod = load()
    m, config = PTX_CONFIGS[cfg_name]
    shape = dict(M=m, **K2_TP8, slot="shared_expert", name="shared_expert", dtype="bfloat16")
    ptx = mod.compile_ptx(config, shape, "sm_90a")
    assert ".target sm_90a" in ptx and ptx.count(".entry") == 2  # gate/up, then down
    for needle in mod.claims(config, shape)["ptx_contains"]:
        assert needle in ptx, needle
    split = {**mod.DEFAULT, **config}["SPLIT_K"]
    assert ("atom.global.gpu.acq_rel.add" in ptx) == (split > 1)
    assert "mma" not in ptx and "cp.async" not in ptx
    gate_up, down = ptx.split(".entry")[1:]
    if {**mod.DEFAULT, **config}["PDL"]:
        assert "griddepcontrol.launch_dependents" in gate_up and "griddepcontrol.wait" not in gate_up
        # the down kernel's w2 loads are all issued before the wait; only h is read after it
        before, after = down.split("griddepcontrol.wait")
        assert before.count("ld.global.v4") >= 1 and after.count("ld.global") == 1
    else:
        assert "griddepcontrol" not in ptx
    assert ".local" not in ptx  # no register spills


# --- through the real pipeline (sandboxed child, interpreter on the CPU) --------------------------------

@pytest.mark.parametrize("m,config", [
    (1, dict(BLOCK_M=1, BLOCK_N=8, BLOCK_K=128, SPLIT_K=2, num_warps=4, BLOCK_N2=16, BLOCK_K2=64, num_warps2=2)),
    (3, dict(BLOCK_M=4, BLOCK_N=4, BLOCK_K=256, SPLIT_K=1, num_warps=4, BLOCK_N2=32, BLOCK_K2=64, num_warps2=4)),
])
def test_pipeline_evaluate_passes(data_dir, m, config):
    from evaluation_helpers import INTERPRETED_BENCH, run_source
    from kernels.slots.base import Shape
    from workers.protocol import Verdict

    result = run_source(VARIANT.read_text(), data_dir, language="triton", m=m, config=config, device="cpu",
                        shape=Shape("shared_expert", "t", {"K": 512, "I": 64}), seed=5, timeout_s=300,
                        bench=INTERPRETED_BENCH)
    assert result.verdict == Verdict.passed, (result.reason_code, result.reason, result.compile and result.compile.log)
    assert result.check.passed and result.bench.median_us > 0
    assert not result.uses_library


if __name__ == "__main__":  # the child process: TRITON_INTERPRET=1 was set before triton's import
    run_cases({case: (check_case, args) for case, args in CASES.items()})
