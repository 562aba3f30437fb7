"""Model specs and the shapes each slot derives from a deployment (DESIGN.md's slot catalogue),
checked without allocating a tensor."""

from __future__ import annotations

import json

import pytest

from kernels.catalogue import get_slot
from kernels.deployment import Deployment
from kernels.specs import BUILTIN_CONFIGS, ModelSpec, SpecError, builtin_spec

# An abridged DeepSeek-V3 config.json as published (HF field names and the fields we ignore).
DEEPSEEK_V3_CONFIG = json.loads("""{
  "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
  "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
  "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "topk_method": "noaux_tc", "scoring_func": "sigmoid",
  "norm_topk_prob": true, "routed_scaling_factor": 2.5, "num_attention_heads": 128, "num_key_value_heads": 128,
  "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
  "num_hidden_layers": 61, "first_k_dense_replace": 3, "vocab_size": 129280, "rms_norm_eps": 1e-06,
  "rope_scaling": {"type": "yarn", "factor": 40}, "torch_dtype": "bfloat16"
}""")


def dims(slot: str, deployment: Deployment) -> list[tuple[str, dict]]:
    return [(s.name, s.dims) for s in get_slot(slot).shapes(deployment)]


def test_k2_like_tp8_shapes_match_design_table():
    d = Deployment(spec="kimi-k2-like", tp=8)
    assert [(n, x["N"], x["K"]) for n, x in dims("dense_gemm", d)] == [
        ("fused_qkv_a", 2112, 7168), ("q_b_proj", 1536, 1536), ("o_proj", 7168, 1024), ("lm_head", 20480, 7168)]
    assert dims("router", d) == [("router_gate", {"E": 384, "K": 7168, "top_k": 8, "n_group": 1, "topk_group": 1,
                                                  "scaling": 2.827, "norm": True, "scoring": "sigmoid"})]
    (name, moe), = dims("moe_experts", d)
    assert name == "moe_experts" and moe == {"E": 384, "K": 7168, "I": 256, "top_k": 8}
    assert (2 * moe["I"], moe["K"]) == (512, 7168)  # w13 per expert
    assert (moe["K"], moe["I"]) == (7168, 256)  # w2 per expert
    assert dims("shared_expert", d) == [("shared_expert", {"K": 7168, "I": 256})]
    assert dims("oproj_residual_norm", d) == [("o_proj_residual_norm", {"N": 7168, "K": 1024, "eps": 1e-6})]
    assert dims("add_rmsnorm", d) == [("add_rmsnorm_hidden", {"H": 7168, "eps": 1e-6})]
    # q_a_layernorm + q_b_proj: the dense slot's q_b_proj with the norm over its K folded in
    assert dims("rmsnorm_gemm", d) == [("q_a_norm_q_b_proj", {"N": 1536, "K": 1536, "eps": 1e-6})]
    # ... and the kv latent's norm (kv_lora_rank = 512) in the same step
    assert dims("mla_norms_gemm", d) == [("q_b_proj_kv_norm", {"N": 1536, "K": 1536, "KV": 512, "eps": 1e-6})]
    # the shared expert as a 385th expert picked by every token, with the routed ones in one pass
    assert dims("moe_experts_shared", d) == [("moe_experts_shared", {"E": 385, "K": 7168, "I": 256, "top_k": 9,
                                                                    "shared": 1})]


def test_tp16_halves_the_sharded_dims():
    d = Deployment(spec="kimi-k2-like", tp=16)
    assert dims("moe_experts", d)[0][1]["I"] == 128
    assert dims("shared_expert", d)[0][1]["I"] == 128
    assert dims("oproj_residual_norm", d)[0][1]["K"] == 512
    assert dims("router", d)[0][1]["E"] == 384  # the gate is replicated


def test_two_shared_experts_are_two_more_experts_and_none_is_no_shape():
    """kimi-k3-unverified has two shared experts (vLLM's one MLP of 2 I is the sum of two of I each)."""
    (_, d), = dims("moe_experts_shared", Deployment(spec="kimi-k3-unverified", tp=8))
    assert (d["E"], d["top_k"], d["shared"], d["I"]) == (898, 18, 2, 384)
    assert dims("moe_experts_shared", Deployment(spec={**DEEPSEEK_V3_CONFIG, "n_shared_experts": 0}, tp=8)) == []


def test_deepseek_v3_router_is_grouped():
    (_, r), = dims("router", Deployment(spec="deepseek-v3", tp=8))
    assert (r["E"], r["n_group"], r["topk_group"], r["scaling"]) == (256, 8, 4, 2.5)


@pytest.mark.parametrize("slot", ["moe_experts", "shared_expert", "oproj_residual_norm", "dense_gemm", "rmsnorm_gemm",
                                  "mla_norms_gemm", "moe_experts_shared"])
def test_tp_that_does_not_divide_raises(slot):
    with pytest.raises(SpecError, match="TP=3"):
        get_slot(slot).shapes(Deployment(spec="kimi-k2-like", tp=3))


@pytest.mark.parametrize("slot", ["rmsnorm_gemm", "mla_norms_gemm"])
def test_q_norm_slots_need_a_q_lora_rank(slot):
    with pytest.raises(SpecError, match="no q_lora_rank"):
        get_slot(slot).shapes(Deployment(spec={**DEEPSEEK_V3_CONFIG, "q_lora_rank": None}, tp=8))


def test_router_rejects_top_k_that_does_not_fit_the_kept_groups():
    cfg = {**BUILTIN_CONFIGS["tiny-moe"], "n_group": 8, "topk_group": 1}  # 1 group of 2 experts, top-4
    with pytest.raises(SpecError, match="does not fit"):
        get_slot("router").shapes(Deployment(spec=cfg, tp=1))


def test_no_shared_expert_gives_no_shape():
    cfg = {**BUILTIN_CONFIGS["tiny-moe"], "n_shared_experts": 0}
    assert get_slot("shared_expert").shapes(Deployment(spec=cfg, tp=1)) == []


def test_hf_config_json_parses():
    spec = ModelSpec.from_hf_config(DEEPSEEK_V3_CONFIG)
    assert spec.name == "deepseek_v3" and spec.verified
    assert (spec.n_routed_experts, spec.n_group, spec.topk_group, spec.routed_scaling_factor) == (256, 8, 4, 2.5)
    (_, r), = dims("router", Deployment(spec=DEEPSEEK_V3_CONFIG, tp=8))
    assert (r["E"], r["n_group"], r["topk_group"]) == (256, 8, 4)
    assert dims("oproj_residual_norm", Deployment(spec=DEEPSEEK_V3_CONFIG, tp=8))[0][1]["K"] == 2048


def test_hf_config_in_a_multimodal_wrapper_parses():
    spec = ModelSpec.from_hf_config({"model_type": "kimi_vl", "text_config": DEEPSEEK_V3_CONFIG})
    assert spec.hidden_size == 7168 and spec.n_routed_experts == 256


def test_hf_config_missing_field_is_a_clear_error():
    cfg = {k: v for k, v in DEEPSEEK_V3_CONFIG.items() if k != "moe_intermediate_size"}
    with pytest.raises(SpecError, match="lacks moe_intermediate_size"):
        ModelSpec.from_hf_config(cfg)


def test_hf_config_bad_value_is_a_clear_error():
    with pytest.raises(SpecError, match="invalid values"):
        ModelSpec.from_hf_config({**DEEPSEEK_V3_CONFIG, "hidden_size": -7168})


def test_kimi_k3_spec_is_flagged_unverified():
    k3 = builtin_spec("kimi-k3-unverified")
    assert not k3.verified and "unverified" in k3.notes
    assert builtin_spec("kimi-k2-like").verified and builtin_spec("deepseek-v3").verified
    d = Deployment(spec="kimi-k3-unverified", tp=8)
    assert dims("moe_experts", d)[0][1] == {"E": 896, "K": 7168, "I": 384, "top_k": 16}
    assert dims("shared_expert", d)[0][1] == {"K": 7168, "I": 768}  # 2 shared experts x 3072 / 8
    assert dims("oproj_residual_norm", d)[0][1]["K"] == 1536  # 96 heads x 128 / 8


def test_unknown_builtin_spec_names_the_known_ones():
    with pytest.raises(SpecError, match="kimi-k2-like"):
        builtin_spec("kimi-k9")
