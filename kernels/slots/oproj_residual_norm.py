"""oproj_residual_norm: o_proj, (all-reduce under TP), residual add, RMSNorm, in one step.

The single-GPU (TP=1 maths) form with the per-rank K: residual_out = a @ w^T + residual;
out = rmsnorm(residual_out) * norm_weight. The TP form adds the all-reduce of a @ w^T across
ranks before the add, with the same interface.
"""

from __future__ import annotations

import torch

from kernels.deployment import Deployment
from kernels.slots.add_rmsnorm import check_norm_outputs, rms_norm_native
from kernels.slots.base import CheckOutcome, KernelFn, Shape, Slot, norm_weight, randn, ref_dtype_for, rms_norm, weight
from kernels.specs import SpecError


class OprojResidualNorm(Slot):
    name = "oproj_residual_norm"
    description = ("residual_out[M,N] = a[M,K] @ w[N,K]^T + residual; out = rmsnorm(residual_out) * norm_weight; "
                   "bf16 in and out, fp32 statistics")
    input_names = ("a", "w", "residual", "norm_weight")
    weight_names = ("w", "norm_weight")
    output_names = ("out", "residual_out")

    def shapes(self, deployment: Deployment) -> list[Shape]:
        s = deployment.model_spec()
        tp = deployment.tp
        if s.num_attention_heads % tp:
            raise SpecError(f"{s.num_attention_heads} heads do not split over TP={tp}")
        dims = {"N": s.hidden_size, "K": s.num_attention_heads // tp * s.v_head_dim, "eps": float(s.rms_norm_eps)}
        return [Shape(self.name, "o_proj_residual_norm", dims, deployment.dtype)]

    def make_inputs(self, shape: Shape, m: int, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        n, k = shape.dims["N"], shape.dims["K"]
        dt = self.dtype(shape)
        return {"a": randn((m, k), g, device, dt), "w": weight((n, k), k, g, device, dt),
                "residual": randn((m, n), g, device, dt), "norm_weight": norm_weight(n, g, device, dt)}

    def alloc_outputs(self, shape: Shape, m: int, device: torch.device) -> dict[str, torch.Tensor]:
        n, dt = shape.dims["N"], self.dtype(shape)
        return {"out": torch.empty((m, n), device=device, dtype=dt),
                "residual_out": torch.empty((m, n), device=device, dtype=dt)}

    def reference(self, shape: Shape, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        rd = ref_dtype_for(inputs["a"].device)
        r = inputs["a"].to(rd) @ inputs["w"].to(rd).t() + inputs["residual"].to(rd)
        return {"out": rms_norm(r, inputs["norm_weight"], shape.dims["eps"]), "residual_out": r}

    def stock(self, shape: Shape, m: int) -> KernelFn:
        eps = shape.dims["eps"]

        def stock_oproj_residual_norm(a: torch.Tensor, w: torch.Tensor, residual: torch.Tensor,
                                      norm_weight: torch.Tensor, out: torch.Tensor, residual_out: torch.Tensor) -> None:
            # vLLM: the o_proj GEMM (bf16 out), then RMSNorm.forward_native(x, residual) unfused.
            r = torch.matmul(a, w.t()).float() + residual.float()
            residual_out.copy_(r)
            out.copy_(rms_norm_native(r, norm_weight, eps))
        return stock_oproj_residual_norm

    def check(self, shape: Shape, outputs: dict[str, torch.Tensor], ref: dict[str, torch.Tensor],
              inputs: dict[str, torch.Tensor]) -> CheckOutcome:
        return check_norm_outputs(outputs, ref, self.dtype(shape))

    def bytes_moved(self, shape: Shape, m: int) -> int:
        n, k = shape.dims["N"], shape.dims["K"]
        # a, w, residual, norm_weight in; out, residual_out written
        return (m * k + n * k + m * n + n + 2 * m * n) * self.dtype(shape).itemsize

    def flops(self, shape: Shape, m: int) -> int:
        n, k = shape.dims["N"], shape.dims["K"]
        return 2 * m * n * k + 6 * m * n  # the GEMM, then add + the norm's 5 per element
