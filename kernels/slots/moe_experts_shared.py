"""moe_experts_shared: the routed experts and the shared expert(s) of M tokens in one pass.

The shared experts are appended to the expert tensors as experts E_routed .. E_routed+S-1 and to every token's list
as S more picks of weight 1 (the router writes them: router_fused.py with shape ``shared`` = S), so that

out[t] = sum_j topk_weights[t,j] * SwiGLU_{topk_ids[t,j]}(x[t]),  j over top_k routed + S shared picks,

is the MoE block's whole output (routed combine + shared MLP) with no launches of its own for the shared expert and no
add. Why: in the decode layer the shared expert's two GEMV launches and the add are three of the block's seven
launches after the norm (bench/decode_layer.py), and their weights are one more expert's bytes. SGLang calls this
shared-experts fusion. It needs every shared expert to have the routed experts' intermediate size: vLLM merges S
shared experts into one MLP of S * I, which is the sum of S separate SwiGLU MLPs of I each.

Shape dims: E = routed + shared experts, top_k = routed picks + shared, shared = S; the routed picks are distinct
experts among the first E - S, the shared picks are the last S ids in every row, in order.
"""

from __future__ import annotations

import torch

from kernels.deployment import Deployment
from kernels.slots.base import Shape, randn
from kernels.slots.moe_experts import _ACT_SEED_OFFSET, MoeExperts, expected_distinct_experts
from kernels.specs import SpecError


class MoeExpertsShared(MoeExperts):
    name = "moe_experts_shared"
    description = ("moe_experts with the S shared experts as experts E-S..E-1 of weight 1 in every row: out[M,K] = "
                   "routed combine + shared MLP in one pass; w13[E,2I,K], w2[E,K,I] bf16, topk_ids[M,top_k] int32 "
                   "(top_k - S distinct routed, then E-S..E-1), topk_weights fp32")

    def shapes(self, deployment: Deployment) -> list[Shape]:
        s = deployment.model_spec()
        if s.n_shared_experts == 0:
            return []  # no shared expert: moe_experts is the whole block
        tp = deployment.tp
        if s.moe_intermediate_size % tp:
            raise SpecError(f"moe_intermediate_size {s.moe_intermediate_size} does not split over TP={tp}")
        dims = {"E": s.n_routed_experts + s.n_shared_experts, "K": s.hidden_size,
                "I": s.moe_intermediate_size // tp, "top_k": s.num_experts_per_tok + s.n_shared_experts,
                "shared": s.n_shared_experts}
        return [Shape(self.name, "moe_experts_shared", dims, deployment.dtype)]

    def _activations(self, shape: Shape, m: int, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed + _ACT_SEED_OFFSET)
        e, k, top_k, shared = (shape.dims[n] for n in ("E", "K", "top_k", "shared"))
        routed_e, routed_k = e - shared, top_k - shared
        x = randn((m, k), g, device, self.dtype(shape))
        routed = torch.rand((m, routed_e), generator=g).argsort(dim=1)[:, :routed_k]  # distinct per token
        ids = torch.cat([routed, torch.arange(routed_e, e).expand(m, shared)], dim=1)
        w = 0.5 + torch.rand((m, routed_k), generator=g)
        w = w / w.sum(dim=1, keepdim=True) * 2.5  # normalised and scaled, as the router writes them
        w = torch.cat([w, torch.ones((m, shared))], dim=1)
        return {"x": x, "topk_ids": ids.to(device=device, dtype=torch.int32),
                "topk_weights": w.to(device=device, dtype=torch.float32)}

    def bytes_moved(self, shape: Shape, m: int) -> int:
        """The routed experts M uniformly routed tokens are expected to touch and the shared ones, each read once,
        plus x, the routing and out."""
        e, k, i, top_k, shared = (shape.dims[n] for n in ("E", "K", "I", "top_k", "shared"))
        es = self.dtype(shape).itemsize
        experts = expected_distinct_experts(e - shared, top_k - shared, m) + shared
        return experts * 3 * i * k * es + 2 * m * k * es + m * top_k * (4 + 4)
