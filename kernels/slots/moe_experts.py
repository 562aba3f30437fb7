"""moe_experts: the routed experts of M tokens, each token's top-k SwiGLU MLPs, weighted and summed.

out[t] = sum_j topk_weights[t,j] * (silu(x[t] @ w13[e][:I]^T) * (x[t] @ w13[e][I:]^T)) @ w2[e]^T,
e = topk_ids[t,j]; w13[E,2I,K] (rows 0..I-1 gate, I..2I-1 up), w2[E,K,I], I = moe_intermediate / TP
(vLLM shards every expert's intermediate dimension over TP; no expert parallelism here).
"""

from __future__ import annotations

import torch

from kernels.deployment import Deployment
from kernels.slots.base import CheckOutcome, KernelFn, Shape, Slot, randn, ref_dtype_for, silu_mul, weight
from kernels.slots.shared_expert import mlp_check, swiglu_mlp_ref
from kernels.specs import SpecError

# Activations (x, routing) come from their own stream so bench sets can vary them while
# sharing one copy of the weights (4.2 GB for K2 at TP8).
_ACT_SEED_OFFSET = 0x9E3779B9


def expected_distinct_experts(e: int, top_k: int, m: int) -> int:
    """Experts touched by M tokens routed uniformly: each expert is missed by one token with
    probability 1 - top_k/E, so E * (1 - (1 - top_k/E)^M) are expected to be hit."""
    return round(e * (1.0 - (1.0 - top_k / e) ** m))


class MoeExperts(Slot):
    name = "moe_experts"
    stock_capturable = False  # the stock loops over ids.unique().tolist(): a host sync per call
    description = ("out[M,K] = sum_j topk_weights[:,j] * SwiGLU_{topk_ids[:,j]}(x); w13[E,2I,K], w2[E,K,I] bf16, "
                   "topk_ids int32 (distinct per token), topk_weights fp32")
    input_names = ("x", "w13", "w2", "topk_ids", "topk_weights")
    weight_names = ("w13", "w2")
    output_names = ("out",)

    def shapes(self, deployment: Deployment) -> list[Shape]:
        s = deployment.model_spec()
        tp = deployment.tp
        if s.moe_intermediate_size % tp:
            raise SpecError(f"moe_intermediate_size {s.moe_intermediate_size} does not split over TP={tp}")
        dims = {"E": s.n_routed_experts, "K": s.hidden_size, "I": s.moe_intermediate_size // tp,
                "top_k": s.num_experts_per_tok}
        return [Shape(self.name, "moe_experts", dims, deployment.dtype)]

    def _weights(self, shape: Shape, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        e, k, i = shape.dims["E"], shape.dims["K"], shape.dims["I"]
        dt = self.dtype(shape)
        w13 = torch.empty((e, 2 * i, k), device=device, dtype=dt)
        w2 = torch.empty((e, k, i), device=device, dtype=dt)
        for j in range(e):  # expert by expert: the fp32 draw of all 384 experts would need 17 GB
            w13[j].copy_(weight((2 * i, k), k, g, device, dt))
            w2[j].copy_(weight((k, i), i, g, device, dt))
        return {"w13": w13, "w2": w2}

    def _activations(self, shape: Shape, m: int, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        """x and the routing. With dims["shared"] = S (moe_experts_shared) the last S experts are in every row after
        the routed picks, with weight 1, and the routed weights are scaled as the router writes them."""
        g = torch.Generator().manual_seed(seed + _ACT_SEED_OFFSET)
        e, k, top_k = shape.dims["E"], shape.dims["K"], shape.dims["top_k"]
        shared = shape.dims.get("shared", 0)
        x = randn((m, k), g, device, self.dtype(shape))
        ids = torch.rand((m, e - shared), generator=g).argsort(dim=1)[:, :top_k - shared]  # distinct per token
        w = 0.5 + torch.rand((m, top_k - shared), generator=g)
        w = w / w.sum(dim=1, keepdim=True)  # positive, normalised like norm_topk_prob
        if shared:
            ids = torch.cat([ids, torch.arange(e - shared, e).expand(m, shared)], dim=1)
            w = torch.cat([w * 2.5, torch.ones((m, shared))], dim=1)
        return {"x": x, "topk_ids": ids.to(device=device, dtype=torch.int32),
                "topk_weights": w.to(device=device, dtype=torch.float32)}

    def make_inputs(self, shape: Shape, m: int, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        return {**self._weights(shape, seed, device), **self._activations(shape, m, seed, device)}

    def input_sets(self, shape: Shape, m: int, seed: int, device: torch.device, n_sets: int) -> list[dict[str, torch.Tensor]]:
        """One copy of the weights shared by every set (too large to rotate); activations and routing
        vary, so each set touches a different subset of the experts."""
        w = self._weights(shape, seed, device)
        return [{**w, **self._activations(shape, m, seed + s, device)} for s in range(n_sets)]

    def alloc_outputs(self, shape: Shape, m: int, device: torch.device) -> dict[str, torch.Tensor]:
        return {"out": torch.empty((m, shape.dims["K"]), device=device, dtype=self.dtype(shape))}

    def reference(self, shape: Shape, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        rd = ref_dtype_for(inputs["x"].device)
        x = inputs["x"].to(rd)
        ids = inputs["topk_ids"].long()
        tw = inputs["topk_weights"].to(rd)
        out = torch.zeros((x.shape[0], shape.dims["K"]), device=x.device, dtype=rd)
        for e in ids.unique().tolist():
            tok, j = (ids == e).nonzero(as_tuple=True)
            y = swiglu_mlp_ref(x[tok], inputs["w13"][e], inputs["w2"][e])
            out.index_add_(0, tok, y * tw[tok, j].unsqueeze(1))
        return {"out": out}

    def stock(self, shape: Shape, m: int) -> KernelFn:
        def stock_moe(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor,
                      topk_weights: torch.Tensor, out: torch.Tensor) -> None:
            # vLLM's naive path: a loop over the experts that have tokens, bf16 GEMMs, weighted
            # index_add into an fp32 accumulator.
            ids = topk_ids.long()
            acc = torch.zeros(out.shape, device=out.device, dtype=torch.float32)
            for e in ids.unique().tolist():
                tok, j = (ids == e).nonzero(as_tuple=True)
                y = torch.matmul(silu_mul(torch.matmul(x[tok], w13[e].t())), w2[e].t())
                acc.index_add_(0, tok, y.float() * topk_weights[tok, j].unsqueeze(1))
            out.copy_(acc)
        return stock_moe

    def check(self, shape: Shape, outputs: dict[str, torch.Tensor], ref: dict[str, torch.Tensor],
              inputs: dict[str, torch.Tensor]) -> CheckOutcome:
        return mlp_check(outputs["out"], ref["out"], self.dtype(shape))

    def bytes_moved(self, shape: Shape, m: int) -> int:
        """Weights of the experts M uniformly routed tokens are expected to touch and of the shared ones
        (moe_experts_shared), each read once, plus x, the routing and out."""
        e, k, i, top_k = (shape.dims[n] for n in ("E", "K", "I", "top_k"))
        shared = shape.dims.get("shared", 0)
        es = self.dtype(shape).itemsize
        experts = expected_distinct_experts(e - shared, top_k - shared, m) + shared
        return experts * 3 * i * k * es + 2 * m * k * es + m * top_k * (4 + 4)

    def flops(self, shape: Shape, m: int) -> int:
        k, i, top_k = shape.dims["K"], shape.dims["I"], shape.dims["top_k"]
        return 6 * m * top_k * k * i  # per (token, expert): 2*2I*K + 2*K*I
