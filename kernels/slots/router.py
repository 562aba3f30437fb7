"""router: gate logits, sigmoid (or softmax) scores + correction bias, grouped top-k, weights.

DeepSeek-V3 ``noaux_tc`` routing as vLLM's ``grouped_topk``: logits = x @ w^T in fp32;
scores = sigmoid(logits); choice = scores + bias; with n_group > 1 a group scores the sum of its
two best ``choice`` values and only the ``topk_group`` best groups stay eligible; topk_ids = top-k
of the masked choice; topk_weights = scores (no bias) at those ids, renormalised if ``norm``,
times ``scaling``.

Tie rule. A legitimate kernel may move a score slightly: vLLM's gate returns bf16 logits, and
rounding a logit l to bf16 (relative 2^-8) moves sigmoid(l) by at most
max_l sigmoid'(l)*|l|*2^-8 = 0.224*2^-8 = 8.8e-4. So each score may move by SCORE_DELTA = 1e-3
(softmax: 2^-5 of the row's best score, from 2*max|l|*2^-8 with |l| <= 4); two experts may then
swap order when their reference ``choice`` values differ by <= 2*delta, and two groups (sums of
two scores) when their group scores differ by <= 4*delta. A variant's top-k set passes when it
is a valid top-k under such perturbations; anything else is a wrong expert.
"""

from __future__ import annotations

import itertools

import torch

from kernels.deployment import Deployment
from kernels.slots.base import CheckOutcome, KernelFn, Shape, Slot, randn, ref_dtype_for, weight
from kernels.specs import SpecError

SCORE_DELTA_SIGMOID = 1e-3
SCORE_DELTA_SOFTMAX_REL = 2.0 ** -5
# Weights are scores at the chosen ids: bf16 logits move a selected sigmoid score by ~1e-3
# relative, a softmax one by up to ~1.6% (|l| * 2^-8 with |l| <= 4).
WEIGHT_RTOL = {"sigmoid": 1e-2, "softmax": 2e-2}
WEIGHT_ATOL = 1e-6
# e_score_correction_bias: small next to the sigmoid score spread (~0.2) but large enough to
# reorder near neighbours, so a kernel that forgets it fails.
BIAS_STD = {"sigmoid": 0.02, "softmax": 0.0}  # softmax: scaled by 1/E below
SCORINGS = ("sigmoid", "softmax")


def _scores(logits: torch.Tensor, scoring: str) -> torch.Tensor:
    if scoring == "sigmoid":
        return torch.sigmoid(logits)
    if scoring == "softmax":
        return torch.softmax(logits, dim=-1)
    raise ValueError(f"unknown scoring {scoring!r}; known: {', '.join(SCORINGS)}")


def grouped_topk(scores: torch.Tensor, bias: torch.Tensor, top_k: int, n_group: int, topk_group: int,
                 scaling: float, norm: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids [M,top_k] int64 sorted by choice, weights [M,top_k], choice [M,E]) in scores' dtype."""
    m, e = scores.shape
    choice = scores + bias.to(scores.dtype)
    masked = choice
    if n_group > 1:
        grouped = choice.view(m, n_group, e // n_group)
        group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)
        keep = group_scores.topk(topk_group, dim=-1).indices
        group_mask = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, keep, True)
        expert_mask = group_mask.unsqueeze(-1).expand(m, n_group, e // n_group).reshape(m, e)
        masked = choice.masked_fill(~expert_mask, float("-inf"))
    ids = masked.topk(top_k, dim=-1).indices
    w = scores.gather(1, ids)
    if norm:
        w = w / w.sum(dim=-1, keepdim=True)
    return ids, w * scaling, choice


class Router(Slot):
    name = "router"
    description = ("gate logits (fp32) of x[M,K] by w[E,K], sigmoid/softmax + correction bias, grouped "
                   "top-k -> topk_ids[M,top_k] int32, topk_weights[M,top_k] fp32 (normalised x scaling)")
    input_names = ("x", "w", "bias")
    weight_names = ("w", "bias")
    output_names = ("topk_ids", "topk_weights")

    def shapes(self, deployment: Deployment) -> list[Shape]:
        s = deployment.model_spec()
        e, k = s.n_routed_experts, s.num_experts_per_tok
        if s.scoring_func not in SCORINGS:
            raise SpecError(f"scoring_func {s.scoring_func!r} not supported; known: {', '.join(SCORINGS)}")
        if e % s.n_group:
            raise SpecError(f"{e} experts do not split into {s.n_group} groups")
        group_size = e // s.n_group
        if s.n_group > 1 and group_size < 2:
            raise SpecError(f"groups of {group_size} expert: a group scores its two best experts")
        if s.topk_group * group_size < k:
            raise SpecError(f"top-{k} does not fit in {s.topk_group} groups of {group_size} experts")
        # The gate is replicated on every rank: no TP split.
        dims = {"E": e, "K": s.hidden_size, "top_k": k, "n_group": s.n_group, "topk_group": s.topk_group,
                "scaling": float(s.routed_scaling_factor), "norm": bool(s.norm_topk_prob),
                "scoring": s.scoring_func}
        return [Shape(self.name, "router_gate", dims, deployment.dtype)]

    def make_inputs(self, shape: Shape, m: int, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        d = shape.dims
        dt = self.dtype(shape)
        scoring = d["scoring"]
        bias_std = BIAS_STD[scoring] if scoring == "sigmoid" else 0.1 / d["E"]
        return {"x": randn((m, d["K"]), g, device, dt),
                "w": weight((d["E"], d["K"]), d["K"], g, device, dt),
                "bias": randn((d["E"],), g, device, torch.float32, std=bias_std)}

    def alloc_outputs(self, shape: Shape, m: int, device: torch.device) -> dict[str, torch.Tensor]:
        k = shape.dims["top_k"]
        return {"topk_ids": torch.empty((m, k), device=device, dtype=torch.int32),
                "topk_weights": torch.empty((m, k), device=device, dtype=torch.float32)}

    def reference(self, shape: Shape, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Outputs plus ``scores`` and ``choice`` [M,E]: the check needs them to judge ties."""
        d = shape.dims
        rd = ref_dtype_for(inputs["x"].device)
        scores = _scores(inputs["x"].to(rd) @ inputs["w"].to(rd).t(), d["scoring"])
        ids, w, choice = grouped_topk(scores, inputs["bias"], d["top_k"], d["n_group"], d["topk_group"],
                                      d["scaling"], d["norm"])
        return {"topk_ids": ids.to(torch.int32), "topk_weights": w, "scores": scores, "choice": choice}

    def stock(self, shape: Shape, m: int) -> KernelFn:
        d = shape.dims

        def stock_router(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, topk_ids: torch.Tensor,
                         topk_weights: torch.Tensor) -> None:
            # vLLM: the bf16 gate GEMM, then grouped_topk in fp32 torch ops.
            scores = _scores(torch.matmul(x, w.t()).float(), d["scoring"])
            ids, wts, _ = grouped_topk(scores, bias, d["top_k"], d["n_group"], d["topk_group"],
                                       d["scaling"], d["norm"])
            topk_ids.copy_(ids)
            topk_weights.copy_(wts)
        return stock_router

    def check(self, shape: Shape, outputs: dict[str, torch.Tensor], ref: dict[str, torch.Tensor],
              inputs: dict[str, torch.Tensor]) -> CheckOutcome:
        d = shape.dims
        e, k = d["E"], d["top_k"]
        ids = outputs["topk_ids"].detach().cpu()
        wts = outputs["topk_weights"].detach().to("cpu", torch.float64)
        ref_ids = ref["topk_ids"].detach().cpu().long()
        scores = ref["scores"].detach().to("cpu", torch.float64)
        choice = ref["choice"].detach().to("cpu", torch.float64)
        m = ref_ids.shape[0]
        if tuple(ids.shape) != (m, k) or tuple(wts.shape) != (m, k):
            return CheckOutcome(False, f"outputs have shapes {tuple(ids.shape)}, {tuple(wts.shape)}; expected {(m, k)}")
        if ids.is_floating_point():
            return CheckOutcome(False, f"topk_ids has dtype {ids.dtype}; expected an integer dtype")
        ids = ids.long()
        bad = (ids < 0) | (ids >= e)
        if bad.any():
            return CheckOutcome(False, f"topk_ids: {int(bad.sum())} ids outside 0..{e - 1} (unwritten ids stay -1)",
                                mismatches=_rows(ids, ref_ids, bad.any(dim=1)))
        srt = ids.sort(dim=1).values
        dup = (srt[:, 1:] == srt[:, :-1]).any(dim=1)
        if dup.any():
            return CheckOutcome(False, f"topk_ids: {int(dup.sum())} rows repeat an expert",
                                mismatches=_rows(ids, ref_ids, dup))
        nonfinite = ~torch.isfinite(wts)
        if nonfinite.any():
            return CheckOutcome(False, f"topk_weights: {int(nonfinite.sum())} of {wts.numel()} elements NaN/Inf "
                                       "(unwritten outputs stay NaN)")
        differs = (srt != ref_ids.sort(dim=1).values).any(dim=1)
        for row in differs.nonzero().flatten().tolist():
            if not self._valid_tie(shape, ids[row], scores[row], choice[row]):
                return CheckOutcome(False, f"topk_ids row {row}: expert set {sorted(ids[row].tolist())} is not the "
                                           f"top-{k} {sorted(ref_ids[row].tolist())} (beyond the tie margin)",
                                    mismatches=_rows(ids, ref_ids, differs))
        # Expected weights for the set the variant chose (a tie swap changes the normaliser).
        expected = scores.gather(1, ids)
        if d["norm"]:
            expected = expected / expected.sum(dim=1, keepdim=True)
        expected = expected * d["scaling"]
        err = (wts - expected).abs()
        wbad = err > WEIGHT_RTOL[d["scoring"]] * expected.abs() + WEIGHT_ATOL
        max_err = err.max().item()
        rel_l2 = ((wts - expected).norm() / expected.norm()).item()
        if wbad.any():
            idx = wbad.nonzero()[:5].tolist()
            rows = [{"index": i, "expert": int(ids[tuple(i)]), "got": wts[tuple(i)].item(),
                     "expected": expected[tuple(i)].item()} for i in idx]
            return CheckOutcome(False, f"topk_weights: {int(wbad.sum())} weights off by more than "
                                       f"{WEIGHT_RTOL[d['scoring']]:.0e} relative", rel_l2, max_err, rows)
        return CheckOutcome(True, "", rel_l2, max_err)

    def _valid_tie(self, shape: Shape, ids: torch.Tensor, scores: torch.Tensor, choice: torch.Tensor) -> bool:
        """Is ``ids`` the grouped top-k of ``choice`` after moving every score by <= delta?"""
        d = shape.dims
        e, n_group, topk_group = d["E"], d["n_group"], d["topk_group"]
        delta = SCORE_DELTA_SIGMOID if d["scoring"] == "sigmoid" else SCORE_DELTA_SOFTMAX_REL * scores.max().item()
        gsize = e // n_group
        chosen = torch.zeros(e, dtype=torch.bool)
        chosen[ids] = True
        used = sorted(set((ids // gsize).tolist()))
        if len(used) > topk_group:
            return False
        group_scores = choice.view(n_group, gsize).topk(min(2, gsize), dim=-1).values.sum(dim=-1)
        others = [g for g in range(n_group) if g not in used]
        for fill in itertools.combinations(others, topk_group - len(used)):
            kept = torch.zeros(n_group, dtype=torch.bool)
            kept[used + list(fill)] = True
            if (~kept).any() and group_scores[kept].min() < group_scores[~kept].max() - 4 * delta:
                continue
            eligible = kept.repeat_interleave(gsize)
            rest = eligible & ~chosen
            if not rest.any() or choice[chosen].min() >= choice[rest].max() - 2 * delta:
                return True
        return False

    def bytes_moved(self, shape: Shape, m: int) -> int:
        d = shape.dims
        es = self.dtype(shape).itemsize
        return (m * d["K"] + d["E"] * d["K"]) * es + d["E"] * 4 + m * d["top_k"] * (4 + 4)

    def flops(self, shape: Shape, m: int) -> int:
        # The gate GEMM; scoring and selection are O(M*E), negligible next to it.
        return 2 * m * shape.dims["E"] * shape.dims["K"]


def _rows(ids: torch.Tensor, ref_ids: torch.Tensor, rows: torch.Tensor, limit: int = 5) -> list[dict]:
    return [{"row": r, "got": sorted(ids[r].tolist()), "expected": sorted(ref_ids[r].tolist())}
            for r in rows.nonzero().flatten()[:limit].tolist()]

