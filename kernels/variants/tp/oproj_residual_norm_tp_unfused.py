"""oproj_residual_norm, TP form as vLLM runs it (unfused), in plain torch.

Rank-local bf16 GEMM of the K-shard, all-reduce of the bf16 partial, then residual add and
RMSNorm as separate ops (RMSNorm.forward_native: normalise in fp32, round, multiply in bf16).
``comm=None``: the TP=1 maths (no collective), so this runs as an ordinary single-device variant too.
"""

import torch

CONFIG_SPACE = {}


def build(config, shape, comm=None):
    if config:
        raise ValueError(f"unknown config {config}")
    eps = float(shape["eps"])

    def run(a, w, residual, norm_weight, out, residual_out):
        partial = torch.matmul(a, w.t())
        if comm is not None:
            comm.all_reduce_(partial)
        r = partial.float() + residual.float()
        residual_out.copy_(r)
        normed = r * torch.rsqrt(r.pow(2).mean(dim=-1, keepdim=True) + eps)
        out.copy_(normed.to(norm_weight.dtype) * norm_weight)

    return run
