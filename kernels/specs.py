"""Model specs: the dimensions of a model, read from a Hugging Face ``config.json``.

Only the fields the decode-path slots need are kept. Built-in specs are plain dicts in the same
format as a HF config so that a user's ``config.json`` and ours go through one parser.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class SpecError(ValueError):
    """A config.json that cannot describe an MoE decoder we know how to tune."""


class ModelSpec(BaseModel):
    name: str
    hidden_size: int = Field(gt=0)
    n_routed_experts: int = Field(gt=0)
    num_experts_per_tok: int = Field(gt=0)
    n_shared_experts: int = Field(ge=0)
    moe_intermediate_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    q_lora_rank: int | None = None
    kv_lora_rank: int = Field(gt=0)
    qk_rope_head_dim: int = Field(gt=0)
    qk_nope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)
    num_hidden_layers: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    scoring_func: str = "sigmoid"
    topk_method: str = "noaux_tc"
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0
    norm_topk_prob: bool = True
    rms_norm_eps: float = 1e-6
    verified: bool = True
    notes: str = ""

    @classmethod
    def from_hf_config(cls, config: dict[str, Any], name: str | None = None) -> "ModelSpec":
        """Parse a HF config.json (DeepSeek-V3 / Kimi-K2 family field names)."""
        cfg = dict(config)
        if "text_config" in cfg and isinstance(cfg["text_config"], dict):  # multimodal wrappers
            cfg = {**cfg, **cfg["text_config"]}
        required = [
            "hidden_size", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
            "num_attention_heads", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
            "v_head_dim", "num_hidden_layers", "vocab_size",
        ]
        missing = [k for k in required if cfg.get(k) is None]
        if missing:
            raise SpecError(f"config.json lacks {', '.join(missing)}: not an MLA + MoE decoder this service tunes")
        spec_name = name or cfg.get("kerneltune_name") or cfg.get("_name_or_path") or cfg.get("model_type") or "custom"
        try:
            return cls(
                name=str(spec_name),
                hidden_size=cfg["hidden_size"],
                n_routed_experts=cfg["n_routed_experts"],
                num_experts_per_tok=cfg["num_experts_per_tok"],
                n_shared_experts=cfg.get("n_shared_experts") or 0,
                moe_intermediate_size=cfg["moe_intermediate_size"],
                num_attention_heads=cfg["num_attention_heads"],
                q_lora_rank=cfg.get("q_lora_rank"),
                kv_lora_rank=cfg["kv_lora_rank"],
                qk_rope_head_dim=cfg["qk_rope_head_dim"],
                qk_nope_head_dim=cfg["qk_nope_head_dim"],
                v_head_dim=cfg["v_head_dim"],
                num_hidden_layers=cfg["num_hidden_layers"],
                vocab_size=cfg["vocab_size"],
                scoring_func=cfg.get("scoring_func", "sigmoid"),
                topk_method=cfg.get("topk_method", "noaux_tc"),
                n_group=cfg.get("n_group") or 1,
                topk_group=cfg.get("topk_group") or 1,
                routed_scaling_factor=cfg.get("routed_scaling_factor", 1.0),
                norm_topk_prob=cfg.get("norm_topk_prob", True),
                rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
                verified=cfg.get("kerneltune_verified", True),
                notes=cfg.get("kerneltune_notes", ""),
            )
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise SpecError(f"config.json has invalid values: {exc}") from exc

    def check_routing(self) -> None:
        if self.n_routed_experts % self.n_group:
            raise SpecError(f"{self.n_routed_experts} experts do not split into {self.n_group} groups")
        if self.topk_group > self.n_group:
            raise SpecError(f"topk_group {self.topk_group} > n_group {self.n_group}")
        if self.num_experts_per_tok > self.n_routed_experts:
            raise SpecError("top-k larger than the number of experts")


_K2_LIKE: dict[str, Any] = dict(
    hidden_size=7168, n_routed_experts=384, num_experts_per_tok=8, n_shared_experts=1,
    moe_intermediate_size=2048, num_attention_heads=64, q_lora_rank=1536, kv_lora_rank=512,
    qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, num_hidden_layers=61,
    vocab_size=163840, scoring_func="sigmoid", topk_method="noaux_tc", n_group=1, topk_group=1,
    routed_scaling_factor=2.827, norm_topk_prob=True, rms_norm_eps=1e-6,
)

BUILTIN_CONFIGS: dict[str, dict[str, Any]] = {
    # The default until Kimi K3's own config.json is published.
    "kimi-k2-like": _K2_LIKE,
    "deepseek-v3": {**_K2_LIKE, "n_routed_experts": 256, "num_attention_heads": 128, "n_group": 8,
                    "topk_group": 4, "routed_scaling_factor": 2.5, "vocab_size": 129280,
                    "num_hidden_layers": 61},
    # Figures from public trackers, not from a published config: flagged unverified on purpose.
    "kimi-k3-unverified": {**_K2_LIKE, "num_attention_heads": 96, "n_routed_experts": 896,
                           "num_experts_per_tok": 16, "n_shared_experts": 2,
                           "moe_intermediate_size": 3072, "num_hidden_layers": 93,
                           "kerneltune_verified": False,
                           "kerneltune_notes": "unverified: built from public tracker figures "
                                               "(96 heads, 896+2 experts, top-16, FFN 3072, 93 layers); "
                                               "MXFP4 experts and the 3584-wide latent are not modelled"},
    # Small enough for CPU tests and the Triton interpreter; same structure as the big ones.
    "tiny-moe": dict(hidden_size=256, n_routed_experts=16, num_experts_per_tok=4, n_shared_experts=1,
                     moe_intermediate_size=64, num_attention_heads=4, q_lora_rank=128, kv_lora_rank=64,
                     qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32, num_hidden_layers=2,
                     vocab_size=1024, scoring_func="sigmoid", topk_method="noaux_tc", n_group=4,
                     topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True, rms_norm_eps=1e-6),
}


def builtin_spec(name: str) -> ModelSpec:
    try:
        cfg = BUILTIN_CONFIGS[name]
    except KeyError:
        raise SpecError(f"unknown model spec {name!r}; known: {', '.join(sorted(BUILTIN_CONFIGS))}") from None
    return ModelSpec.from_hf_config(cfg, name=name)


def builtin_names() -> list[str]:
    return sorted(BUILTIN_CONFIGS)
