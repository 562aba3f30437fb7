"""moe_experts_gemv (kernels/variants/triton/moe_experts_gemv.py) on the CPU, no GPU needed:

- correctness under the Triton interpreter against an fp32 torch reference (h rounded to bf16 as the
  kernel and vLLM do) at M = 1..8, split-K 1 and > 1, a top_k that is not a power of two,
  a hot expert every token picked; each built kernel called three times: the split-K counters must be back
  at zero after every call, and the same inputs must give bit-identical outputs (no atomics in the sums);
- the config space: K2 TP8's shape has configs at M = 1..8 only, DEFAULT fills the H200's SMs;
- ahead-of-time sm_90a PTX for K2 TP8: two launches, CUDA cores only, the claims hold, the w2 loads of a
  PDL config issued before griddepcontrol.wait, no local-memory spills;
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
VARIANT = ROOT / "kernels" / "variants" / "triton" / "moe_experts_gemv.py"
H200_SMS = 132
K2_TP8 = dict(E=384, K=7168, I=256, top_k=8)


def load():
    spec = importlib.util.spec_from_file_location("_triton_variant_moe_experts_gemv", VARIANT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def reference(x, w13, w2, ids, tw) -> torch.Tensor:
    out = torch.zeros((x.shape[0], w2.shape[1]), dtype=torch.float32)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            gate, up = (x[t].float() @ w13[e].float().t()).chunk(2)
            h = (torch.nn.functional.silu(gate) * up).bfloat16().float()
            out[t] += float(tw[t, j]) * (h @ w2[e].float().t())
    return out


# --- interpreted correctness (child process) -------------------------------------------------------

def check_case(config: dict, ms: tuple[int, ...], e: int, k: int, i: int, top_k: int, hot: bool = False) -> None:
    mod = load()
    for m in ms:
        fn = mod.build(config, dict(M=m, E=e, K=k, I=i, top_k=top_k, slot="moe_experts", name="t", dtype="bfloat16"))
        prev = None
        for trial in range(3):
            if trial < 2:  # fresh inputs; the third call repeats the second's
                g = torch.Generator().manual_seed(100 * m + trial)
                x = torch.randn((m, k), generator=g).bfloat16()
                w13 = (torch.randn((e, 2 * i, k), generator=g) / k ** 0.5).bfloat16()
                w2 = (torch.randn((e, k, i), generator=g) / i ** 0.5).bfloat16()
                ids = torch.rand((m, e), generator=g).argsort(dim=1)[:, :top_k].to(torch.int32)
                if hot:  # expert 0 in every token's top-k (read once per pair: the pairs are the groups)
                    rest = torch.rand((m, e - 1), generator=g).argsort(dim=1)[:, :top_k - 1] + 1
                    ids = torch.cat([torch.zeros((m, 1), dtype=rest.dtype), rest], dim=1).to(torch.int32)
                tw = torch.rand((m, top_k), generator=g) + 0.1
            before = [t.clone() for t in (x, w13, w2, ids, tw)]
            out = torch.full((m, k), float("nan"), dtype=torch.bfloat16)  # every element must be written
            fn(x=x, w13=w13, w2=w2, topk_ids=ids, topk_weights=tw, out=out)
            assert all(torch.equal(a, b) for a, b in zip((x, w13, w2, ids, tw), before)), "an input was written"
            assert torch.isfinite(out).all(), (m, config, trial, "unwritten (NaN) outputs")
            torch.testing.assert_close(out.float(), reference(x, w13, w2, ids, tw), rtol=2e-2, atol=2e-2,
                                       msg=lambda s: f"M={m} {config}: {s}")
            if trial == 1:
                assert not torch.equal(out, prev), "same output for new inputs"
            if trial == 2:
                assert torch.equal(out, prev), "not deterministic"
            prev = out.clone()


CASES = {
    # The interpreter runs one program at a time, so the tiles are wide (16-32 rows): tens of programs a
    # call, not hundreds (a program costs milliseconds however small its tile).
    # no split: 4 unrolled K steps, h written straight from the sums; PDL asked for (a CPU runs the plain pair)
    "split1-pdl": (dict(BLOCK_N=16, BLOCK_K=64, SPLIT_K=1, num_warps=2, BLOCK_N2=16, BLOCK_K2=32, num_warps2=1,
                        PDL=1), (1, 2, 5, 8), 16, 256, 32, 4),
    # 7 splits of one step (hidden 448 = 7 x 64): workspace + counter, the last arrival applies silu*mul;
    # top_k 6 pads to 8 (masked experts)
    "split7-topk6": (dict(BLOCK_N=16, BLOCK_K=64, SPLIT_K=7, num_warps=2, BLOCK_N2=16, BLOCK_K2=16,
                          num_warps2=1), (1, 3), 24, 448, 32, 6),
    # 4 splits of 2 steps; w2 in 2 unrolled K steps; expert 0 picked by every token
    "split4-two-steps-hot": (dict(BLOCK_N=32, BLOCK_K=32, SPLIT_K=4, num_warps=4, BLOCK_N2=16, BLOCK_K2=32,
                                  num_warps2=2), (4, 8), 16, 256, 64, 4, True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_interpreted_matches_fp32_torch_on_repeated_calls(interpreted, case):
    assert interpreted[case] == "ok", interpreted[case]


# --- the config space -------------------------------------------------------------------------------

def test_space_covers_m_1_to_8_only_and_default_fills_the_sms():
    from support.spaces import submitted_space

    mod = load()
    space = submitted_space(VARIANT)
    for m in range(1, 9):
        assert space.count(dict(M=m, **K2_TP8)) > 0, m
    for m in (9, 16, 64):
        assert space.count(dict(M=m, **K2_TP8)) == 0, m
    assert space.is_valid(mod.DEFAULT, dict(M=1, **K2_TP8))
    d = mod.DEFAULT
    assert K2_TP8["top_k"] * (K2_TP8["I"] // d["BLOCK_N"]) * d["SPLIT_K"] >= H200_SMS
    assert K2_TP8["K"] // d["BLOCK_N2"] >= H200_SMS


def test_build_rejects_bad_configs():
    mod = load()
    with pytest.raises(ValueError, match="M <= 8"):
        mod.build({}, dict(M=9, **K2_TP8))
    with pytest.raises(ValueError, match=r"\(K // BLOCK_K\) % SPLIT_K"):
        mod.build({"BLOCK_K": 1024, "SPLIT_K": 14}, dict(M=1, **K2_TP8))
    with pytest.raises(ValueError, match=r"top_k \* I \* \(1 \+ BLOCK_N2\) <= 4096"):
        mod.build({"BLOCK_N2": 2, "num_warps2": 1}, dict(M=1, **K2_TP8))
    with pytest.raises(ValueError, match="PDL == 0 or BLOCK_K2 == I"):
        mod.build({"BLOCK_K2": 128, "PDL": 1}, dict(M=1, **K2_TP8))


def test_wrong_call_shapes_are_refused():
    mod = load()
    fn = mod.build({"BLOCK_N": 4, "BLOCK_K": 128, "SPLIT_K": 1, "num_warps": 2, "BLOCK_N2": 2, "BLOCK_K2": 32},
                   dict(M=2, E=4, K=128, I=32, top_k=4))
    x = torch.zeros((2, 128), dtype=torch.bfloat16)
    w13 = torch.zeros((4, 64, 128), dtype=torch.bfloat16)
    w2 = torch.zeros((4, 128, 32), dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="built M=2"):
        fn(x, w13, w2, torch.zeros((2, 3), dtype=torch.int32), torch.zeros((2, 3)), torch.empty_like(x))


# --- ahead-of-time PTX for K2 TP8 ---------------------------------------------------------------------

needs_compiler = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                                    reason="AOT compile needs the real triton.jit (TRITON_INTERPRET is set)")

PTX_CONFIGS = {
    "m1-default": (1, {}),
    "m1-split7-wide": (1, dict(BLOCK_N=8, BLOCK_K=512, SPLIT_K=7, num_warps=8, BLOCK_N2=2, BLOCK_K2=256,
                               num_warps2=2)),
    "m4-split14-two-steps": (4, dict(BLOCK_N=8, BLOCK_K=256, SPLIT_K=14, num_warps=4, BLOCK_N2=4, BLOCK_K2=128,
                                     num_warps2=4)),
    # w2 prefetched before griddepcontrol.wait (programmatic dependent launch of the w2 kernel)
    "m1-pdl": (1, dict(BLOCK_N=4, BLOCK_K=512, SPLIT_K=14, num_warps=2, BLOCK_N2=2, BLOCK_K2=256, num_warps2=2,
                       PDL=1)),
    # the final H200 table's M=1 winner (session ZE): one split, a whole K row pair per CTA, no partials or counter
    "m1-one-split-pdl": (1, dict(BLOCK_N=2, BLOCK_K=1024, SPLIT_K=1, num_warps=8, BLOCK_N2=2, BLOCK_K2=256,
                                 num_warps2=8, PDL=1)),
    "m8-split2": (8, dict(BLOCK_N=4, BLOCK_K=512, SPLIT_K=2, num_warps=8, BLOCK_N2=1, BLOCK_K2=256,
                          num_warps2=1)),
}


@needs_compiler
@pytest.mark.parametrize("cfg_name", sorted(PTX_CONFIGS))
def test_compile_ptx_sm90a_holds_the_claims(cfg_name):
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    mod = load()
    m, config = PTX_CONFIGS[cfg_name]
    shape = dict(M=m, **K2_TP8, slot="moe_experts", name="moe_experts", dtype="bfloat16")
    ptx = mod.compile_ptx(config, shape, "sm_90a")
    assert ".target sm_90a" in ptx and ptx.count(".entry") == 2  # w13, then w2
    for needle in mod.claims(config, shape)["ptx_contains"]:
        assert needle in ptx, needle
    c = {**mod.DEFAULT, **config}
    assert ("atom.global.gpu.acq_rel.add" in ptx) == (c["SPLIT_K"] > 1)
    assert "mma" not in ptx and "cp.async" not in ptx
    w13, w2 = ptx.split(".entry")[1:]
    assert "ld.global.v4" in w13 and "ld.global.v4" in w2  # the gathered expert rows stay 16-byte vectors
    assert "atom" not in w2  # the combine sums over the token's experts in registers
    if c["PDL"]:
        assert "griddepcontrol.launch_dependents" in w13 and "griddepcontrol.wait" not in w13
        # every w2 weight load (16-byte vectors: top_k * BLOCK_N2 * I elements over the CTA's threads) is issued
        # before the wait; after it only h is read (top_k * I elements)
        threads = 32 * c["num_warps2"]
        before, after = w2.split("griddepcontrol.wait")
        assert before.count("ld.global.v4") >= K2_TP8["top_k"] * c["BLOCK_N2"] * K2_TP8["I"] // (8 * threads)
        assert after.count("ld.global") <= max(1, K2_TP8["top_k"] * K2_TP8["I"] // (8 * threads))
    else:
        assert "griddepcontrol" not in ptx
    assert ".local" not in ptx  # no register spills


# --- through the real pipeline (sandboxed child, interpreter on the CPU) --------------------------------

@pytest.mark.parametrize("m,config", [
    # wide tiles (16 rows): few programs for the interpreter, which runs them one at a time
    (1, dict(BLOCK_N=16, BLOCK_K=128, SPLIT_K=2, num_warps=4, BLOCK_N2=16, BLOCK_K2=64, num_warps2=2)),
    (3, dict(BLOCK_N=16, BLOCK_K=256, SPLIT_K=1, num_warps=4, BLOCK_N2=16, BLOCK_K2=64, num_warps2=2, PDL=0)),
])
def test_pipeline_evaluate_passes(data_dir, m, config):
    from evaluation_helpers import INTERPRETED_BENCH, run_source
    from kernels.slots.base import Shape
    from workers.protocol import Verdict

    result = run_source(VARIANT.read_text(), data_dir, language="triton", m=m, config=config, device="cpu",
                        shape=Shape("moe_experts", "t", {"E": 16, "K": 512, "I": 64, "top_k": 4}), seed=5,
                        timeout_s=300, bench=INTERPRETED_BENCH)
    assert result.verdict == Verdict.passed, (result.reason_code, result.reason, result.compile and result.compile.log)
    assert result.check.passed and result.bench.median_us > 0
    assert not result.uses_library


if __name__ == "__main__":  # the child process: TRITON_INTERPRET=1 was set before triton's import
    run_cases({case: (check_case, args) for case, args in CASES.items()})
