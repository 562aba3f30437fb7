"""router, TP form: the gate split over ranks by experts, scores exchanged, one top-k everywhere.

Rank r holds w[E_r, :] (E/world contiguous experts) and scores only those; x and the correction
bias (E fp32 values, 1.5 KB) are replicated. Every rank must return the same (topk_ids,
topk_weights) as the single-device router (checked with the router's top-k-set rule) and the same
answer as every other rank (compared bitwise after sorting each row by expert id: the order of a
row does not change the MoE sum, a different set or weight would make ranks compute different
layers).

Two exchanges:
  * stock form: all_gather the fp32 logits [M, E_r] -> [M, E] on every rank, then the TP=1 routing.
    4*E bytes per token in total.
  * candidate form (kernels/variants/tp/router_tp_topk_exchange.py, self-contained so it exports
    without kerneltune): each rank sends its own top candidates (score, id) and every rank merges
    the same gathered list in the same order.

Why the candidate exchange is exact. With one group (Kimi-K2: n_group = topk_group = 1) every
global top-k expert is among its own rank's local top-k, so k candidates per rank suffice.
With expert groups (DeepSeek-V3: 8 groups, keep 4) a rank's local top-k is NOT enough: it may be
filled from a group that loses globally while the winners of a kept group on that rank were not
sent. The exchange is therefore group-aware: a rank sends, for each group *part* it holds (a whole
group, or the slice of a group that spans ranks), that part's top-c with c = min(part, max(k, 2)).
The union of the parts of a group holds the group's top-2 (its group score) and its top-k, so
every rank can compute the group scores, keep the topk_group best, and take the top-k among the
kept groups' candidates: exactly the single-device selection. Softmax scoring needs the global
normaliser before any score is known, so it adds one tiny exchange (row max and sum of exps).
Sending (score, id) as one fp32 pair per candidate keeps it to ONE all_gather (ids < 2^24 are
exact in fp32); choice = score + bias[id] is recomputed with the replicated bias.
"""

from __future__ import annotations

import torch

from kernels.slots.base import KernelFn, Shape
from kernels.slots.router import Router, _scores, grouped_topk
from kernels.tp import Tensors, TPComm, TPSlot

MAX_EXACT_ID = 1 << 24  # fp32 represents every integer below this exactly


def parts(e: int, n_group: int, world: int) -> tuple[int, int]:
    """(part size, parts per rank): the pieces of groups one rank holds, all of one size."""
    if e % world:
        raise ValueError(f"{e} experts do not split over {world} ranks")
    per_rank, gsize = e // world, e // n_group
    if n_group == 1:
        return per_rank, 1
    if per_rank % gsize == 0:
        return gsize, per_rank // gsize       # whole groups on each rank
    if gsize % per_rank == 0:
        return per_rank, 1                    # a group spans several ranks
    raise ValueError(f"groups of {gsize} experts and {per_rank} experts per rank do not nest")


def candidates_per_part(part: int, top_k: int, n_group: int) -> int:
    # A group's score is the sum of its two best choices: with groups, at least 2 per part.
    return min(part, top_k if n_group == 1 else max(top_k, 2))


def local_logits(x: torch.Tensor, w_r: torch.Tensor) -> torch.Tensor:
    return torch.matmul(x, w_r.t()).float()  # the bf16 gate GEMM, as vLLM


class RouterSplit(TPSlot):
    name = "router_split"
    base = Router()
    description = ("TP router: gate rows E/tp per rank, scores exchanged, identical grouped top-k on every rank")

    def full_shape(self, shape: Shape, world: int) -> Shape:
        d = shape.dims
        if d["E"] >= MAX_EXACT_ID:
            raise ValueError(f"{d['E']} experts: ids would not be exact in fp32")
        parts(d["E"], d["n_group"], world)  # raises when the experts do not split
        return shape  # the router's per-rank shape is already the full problem (replicated gate)

    def shard(self, full_inputs: Tensors, shape: Shape, rank: int, world: int) -> Tensors:
        per = shape.dims["E"] // world
        return {"x": full_inputs["x"].clone(), "w": full_inputs["w"][rank * per:(rank + 1) * per].contiguous(),
                "bias": full_inputs["bias"].clone()}

    def stock(self, shape: Shape, m: int, comm: TPComm) -> KernelFn:
        d = shape.dims

        def stock_router_split(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, topk_ids: torch.Tensor,
                               topk_weights: torch.Tensor) -> None:
            logits = comm.all_gather(local_logits(x, w))     # [world, M, E_r] fp32
            logits = logits.permute(1, 0, 2).reshape(x.shape[0], d["E"])
            ids, wts, _ = grouped_topk(_scores(logits, d["scoring"]), bias, d["top_k"], d["n_group"],
                                       d["topk_group"], d["scaling"], d["norm"])
            topk_ids.copy_(ids)
            topk_weights.copy_(wts)
        return stock_router_split

    def rank_bytes(self, shape: Shape, m: int, world: int) -> int:
        per_rank = Shape(shape.slot, shape.name, {**shape.dims, "E": shape.dims["E"] // world}, shape.dtype)
        return self.base.bytes_moved(per_rank, m)

    def comm_bytes(self, shape: Shape, m: int, world: int) -> int:
        return m * (shape.dims["E"] // world) * 4  # fp32 logits of this rank's experts

    def canonical(self, outputs: Tensors) -> Tensors:
        ids = outputs["topk_ids"].long()
        order = ids.argsort(dim=1)
        return {"topk_ids": ids.gather(1, order), "topk_weights": outputs["topk_weights"].gather(1, order)}

    def replicated_baseline(self, shape: Shape, m: int) -> KernelFn | None:
        # vLLM today: every rank runs the whole gate GEMM (5.5 MB of bf16 at K2) and needs no collective.
        # A split router only wins if it beats this, not just the all_gather form.
        return self.base.stock(shape, m)


def candidate_bytes(shape: Shape, m: int, world: int) -> int:
    """What one rank sends in the candidate exchange (8 bytes per candidate)."""
    d = shape.dims
    part, n_parts = parts(d["E"], d["n_group"], world)
    return m * n_parts * candidates_per_part(part, d["top_k"], d["n_group"]) * 8
