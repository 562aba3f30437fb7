"""mla_norms_gemm in plain torch: q_a norm then q_b_proj, and the kv latent's norm (three steps, as vLLM runs them).

``norm``: "native" is RMSNorm.forward_native (the slot's stock); "rms_norm" is torch.nn.functional.rms_norm, one
fused torch op per norm where the backend has one: the stronger unfused baseline, kept on the leaderboard beside
the one-launch kernel (rmsnorm_gemm_fused.py with the shape's KV) so its speedup can be read against both.
"""

import torch

CONFIG_SPACE = {"norm": ["native", "rms_norm"]}


def build(config, shape):
    norm = config.get("norm", "rms_norm")
    if norm not in CONFIG_SPACE["norm"]:
        raise ValueError(f"norm must be one of {CONFIG_SPACE['norm']}, not {norm!r}")
    eps = float(shape["eps"])

    def rmsnorm(x, weight):
        if norm == "native":
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)).to(x.dtype) * weight
        return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)

    def run(x, norm_weight, w, kv, kv_norm_weight, out, kv_out):
        torch.matmul(rmsnorm(x, norm_weight), w.t(), out=out)
        kv_out.copy_(rmsnorm(kv, kv_norm_weight))

    return run
