"""add_rmsnorm in plain torch.

``stats_from``: the variance from the fp32 sum ("fp32_sum", as vLLM's kernel) or from the stored
bf16 residual_out ("stored_residual": out then normalises exactly the residual the next layer reads).
``weight_mul``: multiply by the weight in "fp32" and round once, or in "bf16".
"""

import torch

CONFIG_SPACE = {"stats_from": ["fp32_sum", "stored_residual"], "weight_mul": ["fp32", "bf16"]}


def build(config, shape):
    stats_from = config.get("stats_from", "fp32_sum")
    weight_mul = config.get("weight_mul", "fp32")
    if stats_from not in ("fp32_sum", "stored_residual") or weight_mul not in ("fp32", "bf16"):
        raise ValueError(f"unknown config {config}")
    eps = float(shape["eps"])

    def run(x, residual, weight, out, residual_out):
        r = x.float() + residual.float()
        residual_out.copy_(r)
        if stats_from == "stored_residual":
            r = residual_out.float()
        normed = r * torch.rsqrt(r.pow(2).mean(dim=-1, keepdim=True) + eps)
        if weight_mul == "fp32":
            out.copy_(normed * weight.float())
        else:
            torch.mul(normed.to(out.dtype), weight, out=out)

    return run
