"""shared_expert in plain torch.

``w13_gemm``: "merged" runs gate and up as one GEMM over w13 (as vLLM); "split" runs two GEMMs on
the halves and skips slicing the merged output.
``intermediate``: "bf16" rounds the activations as vLLM; "fp32" keeps them in fp32 (upcast GEMMs).
"""

import torch

CONFIG_SPACE = {"w13_gemm": ["merged", "split"], "intermediate": ["bf16", "fp32"]}


def build(config, shape):
    merged = config.get("w13_gemm", "merged")
    inter = config.get("intermediate", "bf16")
    if merged not in ("merged", "split") or inter not in ("bf16", "fp32"):
        raise ValueError(f"unknown config {config}")
    i = shape["I"]
    silu = torch.nn.functional.silu

    def run(x, w13, w2, out):
        if inter == "fp32":
            x, w13, w2 = x.float(), w13.float(), w2.float()
        if merged == "merged":
            h = torch.matmul(x, w13.t())
            a = silu(h[:, :i]) * h[:, i:]
        else:
            a = silu(torch.matmul(x, w13[:i].t())) * torch.matmul(x, w13[i:].t())
        if inter == "fp32":
            out.copy_(torch.matmul(a, w2.t()))
        else:
            torch.matmul(a, w2.t(), out=out)

    return run
