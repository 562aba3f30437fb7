"""Triton slot kernels (kernels/variants/triton/*): correctness under the Triton interpreter on
tiny shapes against fp64 references written here, and ahead-of-time sm_90a PTX for the K2 TP8
shapes -- no GPU needed.

The interpreter only works when TRITON_INTERPRET=1 is set before triton is first imported (the
standard-library helpers such as tl.zeros are decorated at import), and other test modules of the
session import triton first. So the interpreted checks (check_* below) run in ONE child process
started with TRITON_INTERPRET=1 (this file executed as a script, printing a JSON verdict per case);
the AOT compile tests run in-process with the interpreter off.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib

import pytest
import torch
from support.interpreted import run_cases

ROOT = pathlib.Path(__file__).resolve().parents[1]
VARIANTS = ROOT / "kernels" / "variants" / "triton"
_CACHE: dict = {}


def load(name: str):
    if name not in _CACHE:
        spec = importlib.util.spec_from_file_location(f"_triton_variant_{name}", VARIANTS / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _CACHE[name] = mod
    return _CACHE[name]


def rel_l2(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def call_checked(fn, inputs: dict, outputs: dict):
    """Poison outputs, call, check inputs untouched and every output element written."""
    for t in outputs.values():
        t.fill_(float("nan") if t.is_floating_point() else -1)
    before = {k: v.clone() for k, v in inputs.items()}
    fn(**inputs, **outputs)
    for k, v in inputs.items():
        assert torch.equal(v, before[k]), f"input {k} was written"
    for k, t in outputs.items():
        if t.is_floating_point():
            assert torch.isfinite(t).all(), f"{k}: unwritten (NaN) elements"
        else:
            assert (t >= 0).all(), f"{k}: unwritten (-1) elements"


def bf(shape, g, std=1.0):
    return (torch.randn(shape, generator=g) * std).bfloat16()


# --- router ------------------------------------------------------------------------------------

def router_ref(x, w, bias, top_k, n_group, topk_group, scaling, norm, scoring):
    logits = x.double() @ w.double().t()
    scores = torch.sigmoid(logits) if scoring == "sigmoid" else torch.softmax(logits, -1)
    m, e = scores.shape
    choice = scores + bias.double()
    masked = choice
    if n_group > 1:
        gs = choice.view(m, n_group, e // n_group).topk(2, dim=-1).values.sum(-1)
        keep = torch.zeros_like(gs, dtype=torch.bool).scatter_(1, gs.topk(topk_group, -1).indices, True)
        masked = choice.masked_fill(~keep.repeat_interleave(e // n_group, 1), float("-inf"))
    return scores, masked


def check_router(epilogue, scoring, n_group, math="dot", topk="pick", pdl=0):
    mod = load("router_fused")
    E, K, top_k, tg, scaling = 16, 256, 4, 2, 2.5
    ms, config = (1, 3, 8), dict(SPLIT_K=2, BLOCK_K=64, BLOCK_E=16, EPILOGUE=epilogue, EPI_M=2, TOPK=topk, PDL=pdl)
    if epilogue == "fused_tiles" and math == "dot":
        # two-level arrival over several tiles: 3 E tiles (the last one ragged) x 2 M tiles at M = 20
        E, ms = 40, (1, 3, 20)
    if math == "fma":
        # CUDA-core form: 2 unrolled steps per split; E = 20 over 8-expert tiles, the last one clamped
        E, ms, config = 20, (1, 2, 3, 4), dict(MATH="fma", SPLIT_K=2, BLOCK_K=64, BLOCK_E=8, EPILOGUE=epilogue,
                                                 EPI_M=1, num_warps=2, num_stages=2, TOPK=topk)
    for M in ms:
        shape = dict(E=E, K=K, top_k=top_k, n_group=n_group, topk_group=tg if n_group > 1 else 1,
                     scaling=scaling, norm=True, scoring=scoring, M=M, slot="router", name="t", dtype="bfloat16")
        block_m = {"BLOCK_M": 1 << (M - 1).bit_length()} if math == "fma" else {}
        fn = mod.build({**config, **block_m}, shape)
        prev = None
        for trial in range(2):  # a second call on new inputs: workspaces must have been re-zeroed
            g = torch.Generator().manual_seed(100 * M + trial)
            inputs = dict(x=bf((M, K), g), w=bf((E, K), g, K ** -0.5), bias=torch.randn(E, generator=g) * 0.02)
            outputs = dict(topk_ids=torch.empty((M, top_k), dtype=torch.int32),
                           topk_weights=torch.empty((M, top_k), dtype=torch.float32))
            call_checked(fn, inputs, outputs)
            scores, masked = router_ref(inputs["x"], inputs["w"], inputs["bias"], top_k, shape["n_group"],
                                        shape["topk_group"], scaling, True, scoring)
            ids = outputs["topk_ids"].long()
            assert (ids < E).all() and all(len(set(r.tolist())) == top_k for r in ids)
            # tie-robust: the chosen ids carry the k best masked choice values
            got = masked.gather(1, ids).sort(-1, descending=True).values
            want = masked.topk(top_k, -1).values
            assert torch.allclose(got, want, atol=1e-5), (M, ids, masked.topk(top_k, -1).indices)
            sw = scores.gather(1, ids)
            ref_w = sw / sw.sum(-1, keepdim=True) * scaling
            assert torch.allclose(outputs["topk_weights"].double(), ref_w, rtol=1e-4, atol=1e-6)
            if prev is not None:
                assert not torch.equal(prev, outputs["topk_weights"])
            prev = outputs["topk_weights"].clone()


def check_router_ties(epilogue, topk="pick"):
    """Top-k picks by packed int64 keys: equal choice values go to the lowest expert (as argmax did), and
    all-negative choice values (bias -1: sigmoid - 1 < 0) order correctly through the sign-flipped bits."""
    mod = load("router_fused")
    E, K, top_k, scaling = 16, 128, 4, 2.0
    g = torch.Generator().manual_seed(3)
    x = bf((1, K), g)
    w = bf((E, K), g, 0.1 * K ** -0.5)
    w[[3, 9, 12]] = (x[0].float() * (0.2 / x[0].float().norm())).bfloat16()  # three equal, largest logits
    bias = torch.full((E,), -1.0)
    config = dict(SPLIT_K=1, BLOCK_K=64, BLOCK_E=16, EPILOGUE=epilogue, EPI_M=1, EPI_WARPS=1, TOPK=topk)
    shape = dict(E=E, K=K, top_k=top_k, n_group=1, topk_group=1, scaling=scaling, norm=True, scoring="sigmoid",
                 M=1, slot="router", name="t", dtype="bfloat16")
    fn = mod.build(config, shape)
    outputs = dict(topk_ids=torch.empty((1, top_k), dtype=torch.int32),
                   topk_weights=torch.empty((1, top_k), dtype=torch.float32))
    call_checked(fn, dict(x=x, w=w, bias=bias), outputs)
    scores, masked = router_ref(x, w, bias, top_k, 1, 1, scaling, True, "sigmoid")
    assert (masked < 0).all()
    fourth = int(masked[0].masked_fill(torch.isin(torch.arange(E), torch.tensor([3, 9, 12])), float("-inf")).argmax())
    assert outputs["topk_ids"][0].tolist() == [3, 9, 12, fourth]
    sw = scores.gather(1, outputs["topk_ids"].long())
    assert torch.allclose(outputs["topk_weights"].double(), sw / sw.sum(-1, keepdim=True) * scaling, rtol=1e-4)


# --- add_rmsnorm / oproj_residual_norm ---------------------------------------------------------

def rms_ref(r, weight, eps):
    r = r.double()
    return r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + eps) * weight.double()


def check_add_rmsnorm(block_h):
    mod = load("add_rmsnorm_fused")
    H, eps = 256, 1e-6
    for M in (1, 3, 8):
        fn = mod.build(dict(BLOCK_H=block_h, num_warps=4), dict(H=H, eps=eps, M=M))
        g = torch.Generator().manual_seed(M)
        inputs = dict(x=bf((M, H), g), residual=bf((M, H), g), weight=(0.5 + torch.rand(H, generator=g)).bfloat16())
        outputs = dict(out=torch.empty((M, H), dtype=torch.bfloat16), residual_out=torch.empty((M, H), dtype=torch.bfloat16))
        call_checked(fn, inputs, outputs)
        r = inputs["x"].double() + inputs["residual"].double()
        assert rel_l2(outputs["residual_out"], r) < 5e-3
        assert rel_l2(outputs["out"], rms_ref(r, inputs["weight"], eps)) < 1e-2


def check_oproj_residual_norm(pdl=0):
    mod = load("oproj_residual_norm_fused")
    N, K, eps = 256, 128, 1e-6
    for M in (1, 3, 8):
        fn = mod.build(dict(BLOCK_N=64, BLOCK_K=64, NORM_BLOCK=128, PDL=pdl), dict(N=N, K=K, eps=eps, M=M))
        for trial in range(2):
            g = torch.Generator().manual_seed(10 * M + trial)
            inputs = dict(a=bf((M, K), g), w=bf((N, K), g, K ** -0.5), residual=bf((M, N), g),
                          norm_weight=(0.5 + torch.rand(N, generator=g)).bfloat16())
            outputs = dict(out=torch.empty((M, N), dtype=torch.bfloat16),
                           residual_out=torch.empty((M, N), dtype=torch.bfloat16))
            call_checked(fn, inputs, outputs)
            r = inputs["a"].double() @ inputs["w"].double().t() + inputs["residual"].double()
            assert rel_l2(outputs["residual_out"], r) < 1e-2
            assert rel_l2(outputs["out"], rms_ref(r, inputs["norm_weight"], eps)) < 1e-2


def check_rmsnorm_gemm(config):
    mod = load("rmsnorm_gemm_fused")
    N, K, eps = 80, 320, 1e-6  # N not a multiple of BLOCK_N; K = 5 steps of 64, ragged over 3 splits or 2 of 128
    for M in (1, 3, 16):
        fn = mod.build(config, dict(N=N, K=K, eps=eps, M=M))
        for trial in range(2):  # a second call: the arrival counters must have been reset
            g = torch.Generator().manual_seed(10 * M + trial)
            inputs = dict(x=bf((M, K), g), norm_weight=(0.5 + torch.rand(K, generator=g)).bfloat16(),
                          w=bf((N, K), g, K ** -0.5))
            outputs = dict(out=torch.empty((M, N), dtype=torch.bfloat16))
            call_checked(fn, inputs, outputs)
            ref = rms_ref(inputs["x"], inputs["norm_weight"], eps) @ inputs["w"].double().t()
            assert rel_l2(outputs["out"], ref) < 1e-2, (config, M, rel_l2(outputs["out"], ref))


def check_mla_norms_gemm(config, ms=(1, 3, 16)):
    """The kv latent's norm in rmsnorm_gemm's launch (mla_norms_gemm): x and kv are column views of one fused_qkv_a
    output row (strided, as the attention block passes them); KV = 48 is not a power of two (masked columns)."""
    mod = load("rmsnorm_gemm_fused")
    N, K, KV, eps = 80, 320, 48, 1e-6
    for M in ms:
        fn = mod.build(config, dict(N=N, K=K, KV=KV, eps=eps, M=M))
        for trial in range(2):  # a second call: the arrival counters must have been reset
            g = torch.Generator().manual_seed(10 * M + trial)
            qkv = bf((M, K + KV + 16), g)
            inputs = dict(x=qkv[:, :K], norm_weight=(0.5 + torch.rand(K, generator=g)).bfloat16(),
                          w=bf((N, K), g, K ** -0.5), kv=qkv[:, K:K + KV],
                          kv_norm_weight=(0.5 + torch.rand(KV, generator=g)).bfloat16())
            outputs = dict(out=torch.empty((M, N), dtype=torch.bfloat16), kv_out=torch.empty((M, KV), dtype=torch.bfloat16))
            call_checked(fn, inputs, outputs)
            ref = rms_ref(inputs["x"], inputs["norm_weight"], eps) @ inputs["w"].double().t()
            assert rel_l2(outputs["out"], ref) < 1e-2, (config, M, rel_l2(outputs["out"], ref))
            kv_ref = rms_ref(inputs["kv"], inputs["kv_norm_weight"], eps)
            assert rel_l2(outputs["kv_out"], kv_ref) < 1e-2, (config, M, rel_l2(outputs["kv_out"], kv_ref))


# --- shared expert / routed experts ------------------------------------------------------------

def mlp_ref(x, w13, w2):
    i = w13.shape[0] // 2
    h = x.double() @ w13.double().t()
    return (torch.nn.functional.silu(h[:, :i]) * h[:, i:]) @ w2.double().t()


def check_shared_expert(split_k, extra=None):
    """extra: REDUCE "partials" (split-order sums: a third call repeating the second must be bit-identical) and PDL
    (the CPU runs the plain pair)."""
    mod = load("shared_expert_fused")
    K, I = 256, 64
    for M in (1, 3, 8, 20):  # 20: two 16-row M blocks
        fn = mod.build(dict(SPLIT_K=split_k, BLOCK_K=64, BLOCK_N=32, BLOCK_N2=64, BLOCK_K2=64, **(extra or {})),
                       dict(K=K, I=I, M=M))
        prev = None
        for trial in range(3 if extra else 2):
            g = torch.Generator().manual_seed(7 * M + min(trial, 1))
            inputs = dict(x=bf((M, K), g), w13=bf((2 * I, K), g, K ** -0.5), w2=bf((K, I), g, I ** -0.5))
            outputs = dict(out=torch.empty((M, K), dtype=torch.bfloat16))
            call_checked(fn, inputs, outputs)
            assert rel_l2(outputs["out"], mlp_ref(inputs["x"], inputs["w13"], inputs["w2"])) < 1e-2
            if trial == 1:
                assert not torch.equal(prev, outputs["out"])
            if trial == 2:
                assert torch.equal(prev, outputs["out"]), "partials summed in split order must be deterministic"
            prev = outputs["out"].clone()


def moe_ref(x, w13, w2, ids, tw):
    out = torch.zeros((x.shape[0], w2.shape[1]), dtype=torch.float64)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            out[t] += float(tw[t, j]) * mlp_ref(x[t:t + 1], w13[e], w2[e])[0]
    return out


def check_moe_experts(cfg, ms):
    mod = load("moe_experts_grouped")
    E, K, I, top_k = 16, 128, 32, 4
    cfg = dict(cfg, BLOCK_K=64, BLOCK_N=32, BLOCK_N2=64, BLOCK_K2=32)
    for M in ms:
        fn = mod.build(cfg, dict(E=E, K=K, I=I, top_k=top_k, M=M))
        for trial in range(2 if M == 3 else 1):
            g = torch.Generator().manual_seed(13 * M + trial)
            ids = torch.stack([torch.randperm(E, generator=g)[:top_k] for _ in range(M)]).to(torch.int32)
            if M == 8 or M > 16:
                ids[:, 1] = 5  # a hot expert picked by every token (more than BLOCK_M rows above M = 16)
                ids[:, 0] = torch.where(ids[:, 0] == 5, 6, ids[:, 0])
                ids[:, 2:] = torch.where(ids[:, 2:] == 5, 7, ids[:, 2:])
                ids[:, 2:] = torch.where((ids[:, 2:] == 7) & (ids[:, :1] == 7), 8, ids[:, 2:])
            inputs = dict(x=bf((M, K), g), w13=bf((E, 2 * I, K), g, K ** -0.5), w2=bf((E, K, I), g, I ** -0.5),
                          topk_ids=ids, topk_weights=torch.rand((M, top_k), generator=g) + 0.1)
            outputs = dict(out=torch.empty((M, K), dtype=torch.bfloat16))
            call_checked(fn, inputs, outputs)
            ref = moe_ref(inputs["x"], inputs["w13"], inputs["w2"], ids, inputs["topk_weights"])
            assert rel_l2(outputs["out"], ref) < 1e-2, cfg


# --- the interpreted cases, run in one child process ----------------------------------------------

CASES = {
    "router-fused-sigmoid-grouped": (check_router, ("fused", "sigmoid", 4)),
    "router-fused_tiles-sigmoid-nogroup": (check_router, ("fused_tiles", "sigmoid", 1)),
    "router-fma-fused_tiles-softmax-grouped": (check_router, ("fused_tiles", "softmax", 4, "fma")),
    "router-separate-sigmoid-nogroup": (check_router, ("separate", "sigmoid", 1)),
    "router-fused-softmax-grouped": (check_router, ("fused", "softmax", 4)),
    "router-fma-fused-sigmoid-grouped": (check_router, ("fused", "sigmoid", 4, "fma")),
    "router-fma-separate-softmax-nogroup": (check_router, ("separate", "softmax", 1, "fma")),
    "router-ties-negative-fused": (check_router_ties, ("fused",)),
    "router-ties-negative-fused_tiles": (check_router_ties, ("fused_tiles",)),
    # the bitonic top-k (tl.topk over the packed keys, then each pick's score by a one-hot sum)
    "router-bitonic-separate-softmax-grouped": (check_router, ("separate", "softmax", 4, "dot", "bitonic")),
    "router-bitonic-fused-sigmoid-nogroup": (check_router, ("fused", "sigmoid", 1, "dot", "bitonic")),
    "router-bitonic-fma-fused_tiles-grouped": (check_router, ("fused_tiles", "sigmoid", 4, "fma", "bitonic")),
    "router-ties-negative-bitonic-separate": (check_router_ties, ("separate", "bitonic")),
    "router-ties-negative-bitonic-fused": (check_router_ties, ("fused", "bitonic")),
    "router-ties-negative-separate-1warp": (check_router_ties, ("separate",)),
    # PDL asked for: the interpreter (no griddepcontrol) runs the plain launch pair, same results
    "router-bitonic-separate-pdl": (check_router, ("separate", "sigmoid", 4, "dot", "bitonic", 1)),
    "add_rmsnorm-one-pass": (check_add_rmsnorm, (256,)),
    "add_rmsnorm-chunked": (check_add_rmsnorm, (64,)),
    "oproj_residual_norm": (check_oproj_residual_norm, ()),
    "oproj_residual_norm-pdl": (check_oproj_residual_norm, (1,)),  # the CPU runs the plain pair
    "rmsnorm_gemm-splitk1": (check_rmsnorm_gemm, (dict(BLOCK_N=32, BLOCK_K=64, SPLIT_K=1),)),
    "rmsnorm_gemm-splitk3": (check_rmsnorm_gemm, (dict(BLOCK_N=32, BLOCK_K=64, SPLIT_K=3),)),
    "rmsnorm_gemm-splitk2-ragged": (check_rmsnorm_gemm, (dict(BLOCK_N=16, BLOCK_K=128, SPLIT_K=2),)),
    "mla_norms_gemm-splitk1": (check_mla_norms_gemm, (dict(BLOCK_N=32, BLOCK_K=64, SPLIT_K=1),)),
    "mla_norms_gemm-splitk3": (check_mla_norms_gemm, (dict(BLOCK_N=32, BLOCK_K=64, SPLIT_K=3),)),
    # 64-row tile, 2 warps: the kv rows in 4 chunks of 16 dealt round 2 split programs, the tile part-empty
    "mla_norms_gemm-m33-2warps": (check_mla_norms_gemm, (dict(BLOCK_M=64, BLOCK_N=16, BLOCK_K=64, SPLIT_K=2,
                                                               num_warps=2), (33,))),
    "shared_expert-splitk1": (check_shared_expert, (1,)),
    "shared_expert-splitk4": (check_shared_expert, (4,)),
    "shared_expert-splitk4-partials-pdl": (check_shared_expert, (4, dict(REDUCE="partials", PDL=1))),
    "shared_expert-splitk2-partials": (check_shared_expert, (2, dict(REDUCE="partials"))),
    "moe-grouped-splitk2": (check_moe_experts, (dict(SPLIT_K=2, COMBINE="grouped"), (1, 3, 8))),
    "moe-grouped-splitk1-hot": (check_moe_experts, (dict(SPLIT_K=1, COMBINE="grouped"), (8,))),
    "moe-pairs": (check_moe_experts, (dict(SPLIT_K=1, COMBINE="pairs"), (3,))),
    # one CTA per 16-row tile: the hot expert's 17 / 40 rows are 2 / 3 tiles, the last partial
    "moe-tiles-splitk2-hot": (check_moe_experts, (dict(SPLIT_K=2, COMBINE="grouped", ALIGN="tiles"), (17, 40))),
    "moe-tiles-splitk1-hot": (check_moe_experts, (dict(SPLIT_K=1, COMBINE="grouped", ALIGN="tiles"), (40,))),
    # no align launch: one group per (token, expert) pair; M=8 has a hot expert that every token picked
    "moe-noalign-grouped-splitk2": (check_moe_experts, (dict(SPLIT_K=2, COMBINE="grouped", ALIGN="none"), (1, 3, 8))),
    "moe-noalign-pairs": (check_moe_experts, (dict(SPLIT_K=1, COMBINE="pairs", ALIGN="none"), (1, 3))),
    # PDL asked for (BLOCK_K2 = I): the interpreter runs the plain launch pair, same results
    "moe-noalign-pdl": (check_moe_experts, (dict(SPLIT_K=2, COMBINE="grouped", ALIGN="none", PDL=1), (1, 3))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_interpreted(interpreted, case):
    assert interpreted[case] == "ok", interpreted[case]


# --- ahead-of-time PTX for the K2 TP8 shapes ---------------------------------------------------

K2 = {
    "router_fused": dict(E=384, K=7168, top_k=8, n_group=1, topk_group=1, scaling=2.827, norm=True,
                         scoring="sigmoid", M=8),
    "moe_experts_grouped": dict(E=384, K=7168, I=256, top_k=8, M=16),
    "shared_expert_fused": dict(K=7168, I=256, M=4),
    "oproj_residual_norm_fused": dict(N=7168, K=1024, eps=1e-6, M=32),
    "add_rmsnorm_fused": dict(H=7168, eps=1e-6, M=64),
    "rmsnorm_gemm_fused": dict(N=1536, K=1536, eps=1e-6, M=16),
}


needs_compiler = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                                    reason="AOT compile needs the real triton.jit (TRITON_INTERPRET is set)")


@needs_compiler
@pytest.mark.parametrize("name,config", [
    ("shared_expert_fused", dict(BLOCK_N=16, BLOCK_K=256, SPLIT_K=8, BLOCK_N2=64, BLOCK_K2=256, REDUCE="partials",
                                 PDL=1)),
    ("oproj_residual_norm_fused", dict(PDL=1)),
])
def test_compile_ptx_k2_pdl_chains_the_second_launch(name, config):
    """PDL: the first kernel signals its dependents and never waits; the second waits, and (the shared expert's
    w2) issues its weight loads before the wait. REDUCE "partials": the split-K reduce has two atomics (the
    arrival counter and its reset), not one per element."""
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    from kernels.backends.triton_backend import claims_for

    mod = load(name)
    ptx = mod.compile_ptx(config, K2[name], "sm_90a")
    for needle in claims_for(mod, config, K2[name]):
        assert needle in ptx, needle
    first, second = ptx.split(".entry")[1:]
    assert "griddepcontrol.launch_dependents" in first and "griddepcontrol.wait" not in first
    before, after = second.split("griddepcontrol.wait")
    if name == "shared_expert_fused":
        assert before.count("ld.global") > after.count("ld.global") >= 1  # w2 before the wait, h after
        assert first.count("atom.") == 2
    assert ".local" not in ptx
    plain = mod.compile_ptx({**config, "PDL": 0}, K2[name], "sm_90a")
    assert "griddepcontrol" not in plain


@needs_compiler
@pytest.mark.parametrize("name", sorted(K2))
def test_compile_ptx_sm90a(name):
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    mod = load(name)
    ptx = mod.compile_ptx({}, dict(K2[name], slot="x", name="k2", dtype="bfloat16"), "sm_90a")
    assert ".target sm_90a" in ptx
    from kernels.backends.triton_backend import claims_for
    for needle in claims_for(mod, {}, K2[name]):
        assert needle in ptx, needle
    assert ".local" not in ptx  # no register spills for the default config
    for p, vals in mod.CONFIG_SPACE.items():
        assert mod.DEFAULT_CONFIG[p] in vals


@needs_compiler
@pytest.mark.parametrize("block_m,num_warps,mma,align", [
    (16, 4, "mma.sync", "sort"), (32, 4, "mma.sync", "sort"), (64, 4, "wgmma.mma_async", "sort"),
    (64, 8, "wgmma.mma_async", "sort"), (16, 4, "mma.sync", "tiles"), (32, 8, "mma.sync", "tiles")])
def test_compile_ptx_k2_moe_grouped_claims_the_mma_triton_emits(block_m, num_warps, mma, align):
    """A warp group owning 64 rows of tokens lowers tl.dot to wgmma: claiming mma.sync there made the service refuse
    every BLOCK_M 64 run (H100 table h100-s26: compile_failed, "PTX lacks claimed instruction mma.sync")."""
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    from kernels.backends.triton_backend import claims_for

    mod = load("moe_experts_grouped")
    config = {**mod.DEFAULT_CONFIG, "BLOCK_M": block_m, "num_warps": num_warps, "ALIGN": align}
    shape = dict(K2["moe_experts_grouped"], M=64)
    claimed = claims_for(mod, config, shape)
    assert mma in claimed
    ptx = mod.compile_ptx(config, shape, "sm_90a")
    for needle in claimed:
        assert needle in ptx, needle


@needs_compiler
@pytest.mark.parametrize("m,config", [
    (1, dict(MATH="fma", BLOCK_M=1, BLOCK_E=16, BLOCK_K=512, SPLIT_K=14, num_warps=4, num_stages=2, EPI_M=1)),
    (4, dict(MATH="fma", BLOCK_M=4, BLOCK_E=16, BLOCK_K=128, SPLIT_K=28, num_warps=4, num_stages=2, EPI_M=1,
             TOPK="bitonic")),
    (1, dict(MATH="fma", BLOCK_M=1, BLOCK_E=16, BLOCK_K=512, SPLIT_K=14, num_warps=4, num_stages=2, EPI_M=1,
             EPILOGUE="fused_tiles")),
])
def test_compile_ptx_k2_router_fma(m, config):
    """The CUDA-core router: one launch, no tensor-core instruction, claims hold, no spills, and the space
    admits the config at its M only."""
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    from kernels.backends.triton_backend import claims_for
    from support.spaces import submitted_space

    mod = load("router_fused")
    shape = dict(K2["router_fused"], M=m)
    ptx = mod.compile_ptx(config, shape, "sm_90a")
    assert ptx.count(".entry") == 1 and "mma" not in ptx and ".local" not in ptx
    for needle in claims_for(mod, config, shape):
        assert needle in ptx, needle
    space = submitted_space(ROOT / "kernels/variants/triton/router_fused.py")
    full = {**mod.DEFAULT_CONFIG, **config}
    assert space.is_valid(full, shape)
    assert not space.is_valid(full, dict(shape, M=8))  # fma stops at M = 4
    assert space.is_valid(dict(mod.DEFAULT_CONFIG), dict(shape, M=8))  # the tensor-core default stays valid


@needs_compiler
@pytest.mark.parametrize("m,config", [
    (1, dict(BLOCK_E=64, BLOCK_K=256, SPLIT_K=16, EPILOGUE="fused", num_warps=4, num_stages=4)),
    (16, dict(BLOCK_E=64, BLOCK_K=128, SPLIT_K=16, EPILOGUE="separate", EPI_WARPS=4, num_stages=3)),
    (64, dict(BLOCK_E=64, BLOCK_K=128, SPLIT_K=16, EPILOGUE="separate", EPI_WARPS=4, num_stages=3)),
])
def test_compile_ptx_k2_router_bitonic(m, config):
    """The bitonic top-k at K2's 384 experts: in the space at its M, claims hold, no spills, and the
    epilogue holds no pick-by-pick chain of TOP_K reductions carrying a score (fewer shuffles than it)."""
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    from kernels.backends.triton_backend import claims_for
    from support.spaces import submitted_space

    mod = load("router_fused")
    shape = dict(K2["router_fused"], M=m)
    config = dict(config, MATH="dot", BLOCK_M=16, EPI_M=1, TOPK="bitonic")
    space = submitted_space(ROOT / "kernels/variants/triton/router_fused.py")
    assert space.is_valid({**mod.DEFAULT_CONFIG, **config}, shape)
    ptx = mod.compile_ptx(config, shape, "sm_90a")
    assert ".local" not in ptx
    for needle in claims_for(mod, config, shape):
        assert needle in ptx, needle
    pick = mod.compile_ptx(dict(config, TOPK="pick"), shape, "sm_90a")
    epi, epi_pick = ptx.split(".entry")[-1], pick.split(".entry")[-1]
    assert epi.count("shfl.sync") < epi_pick.count("shfl.sync")


@needs_compiler
@pytest.mark.parametrize("m,config", [
    # table ZH's winners at M = 1 and M = 2-64, with the epilogue as a dependent launch
    (1, dict(BLOCK_K=256, num_warps=2, num_stages=3)),
    (16, dict(BLOCK_K=128, num_warps=4, num_stages=3)),
])
def test_compile_ptx_k2_router_pdl_loads_the_bias_before_the_wait(m, config):
    """PDL: the GEMV releases its dependent launch before its first load; the epilogue loads the bias before
    griddepcontrol.wait and only the logits after it; the fused forms cannot ask for it."""
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    from kernels.backends.triton_backend import claims_for
    from support.spaces import submitted_space

    mod = load("router_fused")
    shape = dict(K2["router_fused"], M=m)
    config = dict(config, MATH="dot", BLOCK_E=64, SPLIT_K=16, BLOCK_M=16, EPILOGUE="separate", EPI_M=1,
                  EPI_WARPS=4, TOPK="bitonic", PDL=1)
    space = submitted_space(ROOT / "kernels/variants/triton/router_fused.py")
    assert space.is_valid({**mod.DEFAULT_CONFIG, **config}, shape)
    assert not space.is_valid({**mod.DEFAULT_CONFIG, **config, "EPILOGUE": "fused", "EPI_WARPS": 1}, shape)
    ptx = mod.compile_ptx(config, shape, "sm_90a")
    assert ".local" not in ptx
    for needle in claims_for(mod, config, shape):
        assert needle in ptx, needle
    gemv, epi = ptx.split(".entry")[1:]
    first_load = min(gemv.find(op) for op in ("ld.global", "cp.async") if op in gemv)
    assert gemv.index("griddepcontrol.launch_dependents") < first_load
    assert "griddepcontrol.wait" not in gemv and "griddepcontrol" not in epi.split("griddepcontrol.wait")[1]
    before, after = epi.split("griddepcontrol.wait")
    assert before.count("ld.global") >= 1 and "atom" not in before  # the bias; nothing of the logits yet
    assert "ld.global.cg" in after  # the logits, read at L2 after the GEMV's end
    plain = mod.compile_ptx(dict(config, PDL=0), shape, "sm_90a")
    assert "griddepcontrol" not in plain
    assert "griddepcontrol" not in mod.compile_ptx(dict(config, PDL=1), shape, "sm_80")


@needs_compiler
def test_compile_ptx_k2_moe_pdl_prefetches_w2_before_the_wait():
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    from kernels.backends.triton_backend import claims_for
    from support.spaces import submitted_space

    mod = load("moe_experts_grouped")
    shape = dict(K2["moe_experts_grouped"], M=1)
    config = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=128, SPLIT_K=4, num_warps=8, num_stages=4, COMBINE="grouped",
                  BLOCK_N2=64, BLOCK_K2=256, num_warps2=4, num_stages2=3, ALIGN="none", PDL=1)
    space = submitted_space(ROOT / "kernels/variants/triton/moe_experts_grouped.py")
    assert space.is_valid(config, shape)
    assert not space.is_valid(dict(config, BLOCK_K2=128), shape)  # the prefetch covers all of I
    assert not space.is_valid(dict(config, ALIGN="sort"), shape)  # experts known before w13: the router's ids
    ptx = mod.compile_ptx(config, shape, "sm_90a")
    for needle in claims_for(mod, config, shape):
        assert needle in ptx, needle
    w13, w2 = ptx.split(".entry")[1:]
    assert "griddepcontrol.launch_dependents" in w13 and "griddepcontrol.wait" not in w13
    before, after = w2.split("griddepcontrol.wait")
    # the expert's 64 x 256 bf16 rows, 16 bytes a load over 128 threads, all issued before the wait
    assert before.count("ld.global.v4") >= 64 * 256 * 2 // 16 // 128 and "mma" in after
    assert ".local" not in ptx


@needs_compiler
@pytest.mark.parametrize("m,config", [(1, {}), (16, dict(BLOCK_N=64, BLOCK_K=256, SPLIT_K=3, num_warps=4)),
                                      (64, dict(BLOCK_M=64, BLOCK_N=32, BLOCK_K=128, SPLIT_K=4, num_warps=8))])
def test_compile_ptx_k2_mla_norms_gemm(m, config):
    """rmsnorm_gemm_fused with the kv latent's norm (mla_norms_gemm, K2 TP8 KV = 512): one launch, no spills, and
    without KV the kv arguments are compiled out (rmsnorm_gemm's kernel has no branch on the program's column)."""
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    mod = load("rmsnorm_gemm_fused")
    shape = dict(K2["rmsnorm_gemm_fused"], M=m, slot="mla_norms_gemm", name="k2", dtype="bfloat16")
    ptx = mod.compile_ptx(config, dict(shape, KV=512), "sm_90a")
    assert ptx.count(".entry") == 1 and ".local" not in ptx
    plain = mod.compile_ptx(config, shape, "sm_90a")
    assert ".local" not in plain
    assert ptx.count("ld.global") > plain.count("ld.global") and ptx.count("st.global") > plain.count("st.global")


@needs_compiler
def test_compile_ptx_deepseek_v3_router_separate():
    mod = load("router_fused")
    shape = dict(E=256, K=7168, top_k=8, n_group=8, topk_group=4, scaling=2.5, norm=True, scoring="sigmoid", M=64)
    from kernels.backends.triton_backend import claims_for
    config = dict(EPILOGUE="separate", BLOCK_M=64, EPI_M=1)
    ptx = mod.compile_ptx(config, shape, "sm_90a")
    assert ptx.count(".entry") == 2
    claimed = claims_for(mod, config, shape)
    assert "atom.global.gpu.acq_rel.add" not in claimed  # no arrival counter in the two-launch form
    for needle in claimed:
        assert needle in ptx, needle


if __name__ == "__main__":  # the child process: TRITON_INTERPRET=1 was set before triton's import
    run_cases(CASES)
