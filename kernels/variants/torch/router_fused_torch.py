"""router in plain torch, selection without the scatter-built mask.

``logits``: "bf16" keeps the gate GEMM's bf16 output (as vLLM; within the slot's tie margin),
"fp32" upcasts x and w first (exact scores, 2x the weight traffic on the device).
``group_select``: "mask" fills the experts of dropped groups with -inf; "gather" gathers the kept
groups' experts into a [M, topk_group * group_size] block and takes the top-k there (no mask).
"""

import torch

CONFIG_SPACE = {"logits": ["bf16", "fp32"], "group_select": ["mask", "gather"]}


def build(config, shape):
    logits_dtype = config.get("logits", "bf16")
    group_select = config.get("group_select", "mask")
    if logits_dtype not in ("bf16", "fp32") or group_select not in ("mask", "gather"):
        raise ValueError(f"unknown config {config}")
    e, top_k, n_group, topk_group = shape["E"], shape["top_k"], shape["n_group"], shape["topk_group"]
    scaling, norm, scoring = float(shape["scaling"]), bool(shape["norm"]), shape["scoring"]
    gsize = e // n_group

    def scores_of(x, w):
        if logits_dtype == "fp32":
            logits = torch.matmul(x.float(), w.float().t())
        else:
            logits = torch.matmul(x, w.t()).float()
        return torch.sigmoid(logits) if scoring == "sigmoid" else torch.softmax(logits, dim=-1)

    def select(choice):
        m = choice.shape[0]
        if n_group == 1:
            return choice.topk(top_k, dim=-1).indices
        grouped = choice.view(m, n_group, gsize)
        keep = grouped.topk(2, dim=-1).values.sum(dim=-1).topk(topk_group, dim=-1).indices  # [M, topk_group]
        if group_select == "gather":
            block = grouped.gather(1, keep.unsqueeze(-1).expand(m, topk_group, gsize)).reshape(m, -1)
            local = block.topk(top_k, dim=-1).indices  # position inside the gathered block
            return keep.gather(1, local // gsize) * gsize + local % gsize
        mask = torch.ones((m, n_group), dtype=torch.bool, device=choice.device).scatter_(1, keep, False)
        return choice.masked_fill(mask.repeat_interleave(gsize, dim=1), float("-inf")).topk(top_k, dim=-1).indices

    def run(x, w, bias, topk_ids, topk_weights):
        scores = scores_of(x, w)
        ids = select(scores + bias)
        wts = scores.gather(1, ids)
        if norm:
            wts = wts / wts.sum(dim=-1, keepdim=True)
        topk_ids.copy_(ids)
        torch.mul(wts, scaling, out=topk_weights)

    return run
