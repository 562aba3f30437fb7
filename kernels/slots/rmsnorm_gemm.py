"""rmsnorm_gemm: RMSNorm, then a projection, in one step: out = rmsnorm(x) * norm_weight @ w^T.

The MLA attention input path of this model family normalises the q_a projection's output (q_a_layernorm)
and feeds it straight into q_b_proj. Stock runs them as two steps (the norm, then the GEMM); fused, the
norm's statistics ride along the GEMM's own reads of x and the GEMM's result is scaled per row at the
end, so the normalised activations are never written. On the H200 no single kernel can reach the
q_b_proj target of the dense slot (bench/results/2026-12-03-h200-latency-floor.md: a plain read of its
4.7 MB is 2.13x faster than stock at best); folding the norm in removes a whole step instead.
"""

from __future__ import annotations

import torch

from kernels.deployment import Deployment
from kernels.slots.add_rmsnorm import rms_norm_native
from kernels.slots.base import (REL_L2_TOL, CheckOutcome, KernelFn, Shape, Slot, compare_dense, norm_weight, randn,
                                ref_dtype_for, rms_norm, weight)
from kernels.specs import SpecError


class RmsNormGemm(Slot):
    name = "rmsnorm_gemm"
    description = ("out[M,N] = (rmsnorm(x[M,K]) * norm_weight[K]) @ w[N,K]^T (q_a_layernorm + q_b_proj); "
                   "bf16 in and out, fp32 statistics and accumulate")
    rationale = ("no single kernel can take q_b_proj (4.7 MB) to its 2.5x target: a plain read of its bytes is 2.13x "
                 "stock at best on the H200 (bench/results/2026-12-03-h200-latency-floor.md); folding q_a_layernorm "
                 "into its launch removes a whole step instead")
    input_names = ("x", "norm_weight", "w")
    weight_names = ("norm_weight", "w")
    output_names = ("out",)

    def shapes(self, deployment: Deployment) -> list[Shape]:
        s = deployment.model_spec()
        tp = deployment.tp
        if not s.q_lora_rank:
            raise SpecError(f"{s.name} has no q_lora_rank: its q projection has no norm before it")
        if s.num_attention_heads % tp:
            raise SpecError(f"{s.num_attention_heads} heads do not split over TP={tp}")
        heads = s.num_attention_heads // tp
        dims = {"N": heads * (s.qk_nope_head_dim + s.qk_rope_head_dim), "K": s.q_lora_rank,
                "eps": float(s.rms_norm_eps)}
        return [Shape(self.name, "q_a_norm_q_b_proj", dims, deployment.dtype)]

    def make_inputs(self, shape: Shape, m: int, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        n, k = shape.dims["N"], shape.dims["K"]
        dt = self.dtype(shape)
        return {"x": randn((m, k), g, device, dt), "norm_weight": norm_weight(k, g, device, dt),
                "w": weight((n, k), k, g, device, dt)}

    def alloc_outputs(self, shape: Shape, m: int, device: torch.device) -> dict[str, torch.Tensor]:
        return {"out": torch.empty((m, shape.dims["N"]), device=device, dtype=self.dtype(shape))}

    def reference(self, shape: Shape, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        rd = ref_dtype_for(inputs["x"].device)
        normed = rms_norm(inputs["x"].to(rd), inputs["norm_weight"], shape.dims["eps"])
        return {"out": normed @ inputs["w"].to(rd).t()}

    def stock(self, shape: Shape, m: int) -> KernelFn:
        eps = shape.dims["eps"]

        def stock_rmsnorm_gemm(x: torch.Tensor, norm_weight: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
            # vLLM: q_a_layernorm (RMSNorm.forward_native, as the other norm slots' stock), then q_b_proj.
            torch.matmul(rms_norm_native(x.float(), norm_weight, eps), w.t(), out=out)
        return stock_rmsnorm_gemm

    def check(self, shape: Shape, outputs: dict[str, torch.Tensor], ref: dict[str, torch.Tensor],
              inputs: dict[str, torch.Tensor]) -> CheckOutcome:
        # As dense_gemm: the normalised row is rounded to bf16 once before (or, fused, inside) the GEMM.
        return compare_dense("out", outputs["out"], ref["out"], rel_l2_tol=REL_L2_TOL[self.dtype(shape)],
                             elem_rtol=2e-2, elem_atol_rms=2e-2)

    def bytes_moved(self, shape: Shape, m: int) -> int:
        n, k = shape.dims["N"], shape.dims["K"]
        return (m * k + k + n * k + m * n) * self.dtype(shape).itemsize  # x, norm_weight, w in; out written

    def flops(self, shape: Shape, m: int) -> int:
        n, k = shape.dims["N"], shape.dims["K"]
        return 2 * m * n * k + 4 * m * k  # the GEMM, then the norm's square, sum, scale and weight
