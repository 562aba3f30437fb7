"""oproj_residual_norm in plain torch.

``gemm``: "addmm" adds the residual in the GEMM's epilogue (one library call writes
residual_out); "matmul_add" runs the GEMM then adds in fp32 (as vLLM).
``weight_mul``: multiply by the norm weight in "fp32" and round once, or in "bf16" (as vLLM).
"""

import torch

CONFIG_SPACE = {"gemm": ["addmm", "matmul_add"], "weight_mul": ["fp32", "bf16"]}


def build(config, shape):
    gemm = config.get("gemm", "addmm")
    weight_mul = config.get("weight_mul", "fp32")
    if gemm not in ("addmm", "matmul_add") or weight_mul not in ("fp32", "bf16"):
        raise ValueError(f"unknown config {config}")
    eps = float(shape["eps"])

    def run(a, w, residual, norm_weight, out, residual_out):
        if gemm == "addmm":
            torch.addmm(residual, a, w.t(), out=residual_out)
            r = residual_out.float()
        else:
            r = torch.matmul(a, w.t()).float() + residual.float()
            residual_out.copy_(r)
        normed = r * torch.rsqrt(r.pow(2).mean(dim=-1, keepdim=True) + eps)
        if weight_mul == "fp32":
            out.copy_(normed * norm_weight.float())
        else:
            torch.mul(normed.to(out.dtype), norm_weight, out=out)

    return run
