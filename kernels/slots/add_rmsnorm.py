"""add_rmsnorm: fused residual add + RMSNorm, as vLLM's fused_add_rms_norm.

residual_out = x + residual; out = residual_out * rsqrt(mean(residual_out^2) + eps) * weight,
the sum and the statistics in fp32 (reference: fp64), both outputs stored in the model dtype.
"""

from __future__ import annotations

import torch

from kernels.deployment import Deployment
from kernels.slots.base import (REL_L2_TOL, CheckOutcome, KernelFn, Shape, Slot, compare_dense, merge_outcomes,
                                norm_weight, randn, ref_dtype_for, rms_norm)

# Both outputs are one bf16 rounding (2^-9) of an fp32 value plus, in unfused paths, the bf16
# multiply by the weight: 2e-2 of |ref| covers that. 2e-2 of rms(ref) covers a sum that cancels
# to near 0 after one addend was rounded to bf16 (o_proj's GEMM output: 2^-9 of up to 5 rms).
ELEM_RTOL = 2e-2
ELEM_ATOL_RMS = 2e-2


def check_norm_outputs(outputs: dict[str, torch.Tensor], ref: dict[str, torch.Tensor],
                       dtype: torch.dtype) -> CheckOutcome:
    """The rule for slots returning (normed ``out``, ``residual_out``): both checked alike."""
    return merge_outcomes([compare_dense(n, outputs[n], ref[n], rel_l2_tol=REL_L2_TOL[dtype], elem_rtol=ELEM_RTOL,
                                         elem_atol_rms=ELEM_ATOL_RMS) for n in ("out", "residual_out")])


def rms_norm_native(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """vLLM's RMSNorm.forward_native on an fp32 x: normalise in fp32, round, multiply in the model dtype."""
    normed = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    return normed.to(weight.dtype) * weight


class AddRmsNorm(Slot):
    name = "add_rmsnorm"
    description = "residual_out = x + residual; out = rmsnorm(residual_out) * weight (fp32 maths); [M,H] bf16"
    input_names = ("x", "residual", "weight")
    weight_names = ("weight",)
    output_names = ("out", "residual_out")

    def shapes(self, deployment: Deployment) -> list[Shape]:
        s = deployment.model_spec()
        # The hidden state is replicated on every rank (after the all-reduce): no TP split.
        return [Shape(self.name, "add_rmsnorm_hidden", {"H": s.hidden_size, "eps": float(s.rms_norm_eps)},
                      deployment.dtype)]

    def make_inputs(self, shape: Shape, m: int, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        h = shape.dims["H"]
        dt = self.dtype(shape)
        return {"x": randn((m, h), g, device, dt), "residual": randn((m, h), g, device, dt),
                "weight": norm_weight(h, g, device, dt)}

    def alloc_outputs(self, shape: Shape, m: int, device: torch.device) -> dict[str, torch.Tensor]:
        h, dt = shape.dims["H"], self.dtype(shape)
        return {"out": torch.empty((m, h), device=device, dtype=dt),
                "residual_out": torch.empty((m, h), device=device, dtype=dt)}

    def reference(self, shape: Shape, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        rd = ref_dtype_for(inputs["x"].device)
        r = inputs["x"].to(rd) + inputs["residual"].to(rd)
        return {"out": rms_norm(r, inputs["weight"], shape.dims["eps"]), "residual_out": r}

    def stock(self, shape: Shape, m: int) -> KernelFn:
        eps = shape.dims["eps"]

        def stock_add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, out: torch.Tensor,
                              residual_out: torch.Tensor) -> None:
            r = x.float() + residual.float()
            residual_out.copy_(r)
            out.copy_(rms_norm_native(r, weight, eps))
        return stock_add_rmsnorm

    def check(self, shape: Shape, outputs: dict[str, torch.Tensor], ref: dict[str, torch.Tensor],
              inputs: dict[str, torch.Tensor]) -> CheckOutcome:
        return check_norm_outputs(outputs, ref, self.dtype(shape))

    def bytes_moved(self, shape: Shape, m: int) -> int:
        h = shape.dims["H"]
        return (4 * m * h + h) * self.dtype(shape).itemsize  # x, residual, weight in; out, residual_out

    def flops(self, shape: Shape, m: int) -> int:
        return 5 * m * shape.dims["H"]  # add, square, sum, scale, weight multiply per element
