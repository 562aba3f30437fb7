"""router, TP form by top-k candidate exchange (fewer bytes than the logits), in plain torch.

Each rank scores its E/tp experts and sends, for every piece of an expert group it holds, that
piece's top-c (score, expert id) as fp32 pairs in ONE all_gather; every rank merges the same
gathered list in the same order, so all ranks return the same top-k. Why this equals the
single-device selection (kernels/tp/router_split.py has the argument): one group -> each global
winner is in its own rank's local top-k; with groups -> per-piece top-max(k, 2) holds every
group's score (top-2 sum) and its top-k, so group masking can be done after the exchange.
Softmax needs the global normaliser first: one extra exchange of (row max, sum exp), [M, 2].

Bytes per token sent by one rank: 8 * pieces * c, against 4 * E/tp for the logits: Kimi-K2 TP8
64 B vs 192 B; DeepSeek-V3 TP8 (one group per rank) 64 B vs 128 B. At decode sizes both
collectives are latency-bound: the win is small unless the exchange rides a low-latency path.

``comm=None``: the TP=1 router (one rank holds all experts; same code path, world size 1).
"""

import torch

CONFIG_SPACE = {}


def pieces(e, n_group, world):
    """(piece size, pieces per rank): the parts of expert groups one rank holds."""
    per_rank, gsize = e // world, e // n_group
    if e % world:
        raise ValueError(f"{e} experts do not split over {world} ranks")
    if n_group == 1:
        return per_rank, 1
    if per_rank % gsize == 0:
        return gsize, per_rank // gsize
    if gsize % per_rank == 0:
        return per_rank, 1
    raise ValueError(f"groups of {gsize} and {per_rank} experts per rank do not nest")


def build(config, shape, comm=None):
    if config:
        raise ValueError(f"unknown config {config}")
    e, k, n_group, topk_group = shape["E"], shape["top_k"], shape["n_group"], shape["topk_group"]
    scaling, norm, scoring = float(shape["scaling"]), bool(shape["norm"]), shape["scoring"]
    rank, world = (comm.rank, comm.world_size) if comm is not None else (0, 1)
    if e >= 1 << 24:
        raise ValueError("expert ids must be exact in fp32")
    piece, n_pieces = pieces(e, n_group, world)
    c = min(piece, k if n_group == 1 else max(k, 2))
    lo = rank * (e // world)

    def scores_of(logits):
        if scoring == "sigmoid":
            return torch.sigmoid(logits)
        mx = logits.max(dim=-1).values
        se = (logits - mx[:, None]).exp().sum(dim=-1)
        stats = torch.stack([mx, se], dim=-1)
        g = comm.all_gather(stats) if comm is not None else stats[None]
        gmax = g[..., 0].max(dim=0).values
        z = (g[..., 1] * (g[..., 0] - gmax).exp()).sum(dim=0)
        return (logits - gmax[:, None]).exp() / z[:, None]

    def run(x, w, bias, topk_ids, topk_weights):
        m = x.shape[0]
        scores = scores_of(torch.matmul(x, w.t()).float())               # [M, E/world]
        choice = (scores + bias[lo:lo + scores.shape[1]]).view(m, n_pieces, piece)
        idx = choice.topk(c, dim=-1).indices                              # [M, P, c]
        ids = idx + (lo + torch.arange(n_pieces, device=x.device) * piece)[None, :, None]
        sc = scores.view(m, n_pieces, piece).gather(2, idx)
        mine = torch.stack([sc, ids.float()], dim=-1)                     # [M, P, c, 2]
        every = comm.all_gather(mine) if comm is not None else mine[None]
        cand = every.permute(1, 0, 2, 3, 4).reshape(m, -1, 2)             # pieces in expert-id order
        cs, cid = cand[..., 0], cand[..., 1].long()
        cchoice = cs + bias[cid]
        if n_group > 1:
            grouped = cchoice.view(m, n_group, -1)                        # a group's pieces are adjacent
            keep = grouped.topk(2, dim=-1).values.sum(dim=-1).topk(topk_group, dim=-1).indices
            dropped = torch.ones((m, n_group), dtype=torch.bool, device=x.device).scatter_(1, keep, False)
            cchoice = cchoice.masked_fill(dropped.repeat_interleave(grouped.shape[-1], dim=1), float("-inf"))
        pos = cchoice.topk(k, dim=-1).indices
        wts = cs.gather(1, pos)
        if norm:
            wts = wts / wts.sum(dim=-1, keepdim=True)
        topk_ids.copy_(cid.gather(1, pos))
        torch.mul(wts, scaling, out=topk_weights)

    return run
