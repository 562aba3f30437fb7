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
experts among the first E - S, the shared picks are the last S ids in every row, in order (MoeExperts draws such
inputs and counts the bytes where the dims have ``shared``).
"""

from __future__ import annotations

from kernels.deployment import Deployment
from kernels.slots.base import Shape
from kernels.slots.moe_experts import MoeExperts
from kernels.specs import SpecError


class MoeExpertsShared(MoeExperts):
    name = "moe_experts_shared"
    description = ("moe_experts with the S shared experts as experts E-S..E-1 of weight 1 in every row: out[M,K] = "
                   "routed combine + shared MLP in one pass; w13[E,2I,K], w2[E,K,I] bf16, topk_ids[M,top_k] int32 "
                   "(top_k - S distinct routed, then E-S..E-1), topk_weights fp32")
    rationale = ("the shared expert's two launches and the add are three of the MoE block's seven after the norm; "
                 "as the routed experts' (E+1)-th expert its bytes ride the same grouped pass (SGLang's "
                 "shared-experts fusion; bench/results/2026-12-04-h200-summary.md, sessions 25-28)")

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
