"""rmsnorm_gemm in plain torch: the norm, then the GEMM (two steps, as vLLM runs them).

``norm``: "native" is RMSNorm.forward_native (the slot's stock: five elementwise launches);
"rms_norm" is torch.nn.functional.rms_norm, one fused torch op where the backend has one -- the
stronger unfused baseline, close to vLLM's own CUDA rms_norm, kept on the leaderboard beside the
fused kernel so its speedup can be read against both.
"""

import torch

CONFIG_SPACE = {"norm": ["native", "rms_norm"]}


def build(config, shape):
    norm = config.get("norm", "rms_norm")
    if norm not in CONFIG_SPACE["norm"]:
        raise ValueError(f"norm must be one of {CONFIG_SPACE['norm']}, not {norm!r}")
    eps = float(shape["eps"])
    k = int(shape["K"])

    def run(x, norm_weight, w, out):
        if norm == "native":
            xf = x.float()
            normed = (xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)).to(x.dtype) * norm_weight
        else:
            normed = torch.nn.functional.rms_norm(x, (k,), norm_weight, eps)
        torch.matmul(normed, w.t(), out=out)

    return run
