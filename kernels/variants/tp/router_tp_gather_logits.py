"""router, TP form by logits exchange, in plain torch.

Each rank runs the bf16 gate GEMM of its E/tp experts, all_gathers the fp32 logits (4 bytes per
expert per token), and every rank runs the full grouped top-k on identical [M, E] logits, so all
ranks agree. ``comm=None``: the TP=1 router (all E experts local).
"""

import torch

CONFIG_SPACE = {}


def grouped_select(choice, top_k, n_group, topk_group):
    m, e = choice.shape
    if n_group == 1:
        return choice.topk(top_k, dim=-1).indices
    grouped = choice.view(m, n_group, e // n_group)
    keep = grouped.topk(2, dim=-1).values.sum(dim=-1).topk(topk_group, dim=-1).indices
    dropped = torch.ones((m, n_group), dtype=torch.bool, device=choice.device).scatter_(1, keep, False)
    return choice.masked_fill(dropped.repeat_interleave(e // n_group, dim=1), float("-inf")).topk(top_k, dim=-1).indices


def build(config, shape, comm=None):
    if config:
        raise ValueError(f"unknown config {config}")
    e, top_k, n_group, topk_group = shape["E"], shape["top_k"], shape["n_group"], shape["topk_group"]
    scaling, norm, scoring = float(shape["scaling"]), bool(shape["norm"]), shape["scoring"]

    def run(x, w, bias, topk_ids, topk_weights):
        logits = torch.matmul(x, w.t()).float()
        if comm is not None:
            logits = comm.all_gather(logits).permute(1, 0, 2).reshape(x.shape[0], e)
        scores = torch.sigmoid(logits) if scoring == "sigmoid" else torch.softmax(logits, dim=-1)
        ids = grouped_select(scores + bias, top_k, n_group, topk_group)
        wts = scores.gather(1, ids)
        if norm:
            wts = wts / wts.sum(dim=-1, keepdim=True)
        topk_ids.copy_(ids)
        torch.mul(wts, scaling, out=topk_weights)

    return run
