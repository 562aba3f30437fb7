"""oproj_residual_norm, TP form with the residual add and RMSNorm as the all-reduce's epilogue.

The partial GEMM, the all-reduce, then ONE step on the reduced sum: add the residual, write
residual_out, normalise and multiply by the weight in fp32, round once. On a GPU this step is what
a custom all-reduce kernel does in its epilogue (the reduced row is in registers: no extra pass
over [M, N]); in torch the fusion is the order of the maths (one rounding of ``out`` instead of
two), which is what the CPU check can see.

``reduce_dtype``: "bf16" reduces the bf16 partial (as vLLM: M*N*2 bytes per rank); "fp32" reduces
fp32 partials (2x the bytes, one rounding of the sum instead of one per rank).
``comm=None``: the TP=1 maths.
"""

import torch

CONFIG_SPACE = {"reduce_dtype": ["bf16", "fp32"]}


def build(config, shape, comm=None):
    reduce_dtype = config.get("reduce_dtype", "bf16")
    if reduce_dtype not in ("bf16", "fp32") or set(config) - {"reduce_dtype"}:
        raise ValueError(f"unknown config {config}")
    eps = float(shape["eps"])

    def add_norm_epilogue(reduced, residual, norm_weight, out, residual_out):
        # In place on the reduced buffer when it is already fp32: no extra [M, N] temporary.
        r = reduced.add_(residual.float()) if reduced.dtype == torch.float32 else reduced.float().add_(residual.float())
        residual_out.copy_(r)
        r.mul_(torch.rsqrt(r.pow(2).mean(dim=-1, keepdim=True) + eps))
        out.copy_(r.mul_(norm_weight.float()))

    def run(a, w, residual, norm_weight, out, residual_out):
        if reduce_dtype == "bf16":
            partial = torch.matmul(a, w.t())
        elif a.is_cuda:
            partial = torch.mm(a, w.t(), out_dtype=torch.float32)  # fp32 accumulator kept, bf16 reads
        else:
            partial = torch.matmul(a.float(), w.float().t())  # aten::mm.dtype is CUDA-only
        if comm is not None:
            comm.all_reduce_(partial)
        add_norm_epilogue(partial, residual, norm_weight, out, residual_out)

    return run
