"""shared_expert: the dense SwiGLU MLP of the shared expert(s), sharded over TP.

out[M,K] = (silu(x @ w13[:I]^T) * (x @ w13[I:]^T)) @ w2^T, with I = n_shared_experts *
moe_intermediate_size / TP (vLLM merges the shared experts into one MLP and shards its
intermediate dimension; the partial sums are all-reduced together with the routed experts').
"""

from __future__ import annotations

import torch

from kernels.deployment import Deployment
from kernels.slots.base import (REL_L2_TOL, CheckOutcome, KernelFn, Shape, Slot, compare_dense, randn,
                                ref_dtype_for, silu_mul, weight)
from kernels.specs import SpecError

# Stock paths round gate/up and silu*mul to bf16 (vLLM does): that is ~0.4% of rms(out) of Gaussian
# noise per element, whose tails over 0.5M elements (M=64, K=7168) reach ~6 sigma = 2.5% of rms.
# 2e-2 of |ref| plus 5e-2 of rms(ref) leaves 2x headroom and still fails one element off by 10% of rms.
ELEM_RTOL = 2e-2
ELEM_ATOL_RMS = 5e-2


def swiglu_mlp_ref(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """The MLP in x's dtype (callers pass high precision)."""
    return silu_mul(x @ w13.to(x.dtype).t()) @ w2.to(x.dtype).t()


def mlp_check(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> CheckOutcome:
    return compare_dense("out", out, ref, rel_l2_tol=REL_L2_TOL[dtype], elem_rtol=ELEM_RTOL,
                         elem_atol_rms=ELEM_ATOL_RMS)


class SharedExpert(Slot):
    name = "shared_expert"
    description = "out[M,K] = (silu(x@w13[:I]^T) * x@w13[I:]^T) @ w2^T; w13[2I,K], w2[K,I], bf16"
    input_names = ("x", "w13", "w2")
    weight_names = ("w13", "w2")
    output_names = ("out",)

    def shapes(self, deployment: Deployment) -> list[Shape]:
        s = deployment.model_spec()
        if s.n_shared_experts == 0:
            return []  # the model has no shared expert: nothing to tune
        tp = deployment.tp
        total = s.n_shared_experts * s.moe_intermediate_size
        if total % tp:
            raise SpecError(f"shared-expert intermediate {total} does not split over TP={tp}")
        return [Shape(self.name, "shared_expert", {"K": s.hidden_size, "I": total // tp}, deployment.dtype)]

    def make_inputs(self, shape: Shape, m: int, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        k, i = shape.dims["K"], shape.dims["I"]
        dt = self.dtype(shape)
        return {"x": randn((m, k), g, device, dt), "w13": weight((2 * i, k), k, g, device, dt),
                "w2": weight((k, i), i, g, device, dt)}

    def alloc_outputs(self, shape: Shape, m: int, device: torch.device) -> dict[str, torch.Tensor]:
        return {"out": torch.empty((m, shape.dims["K"]), device=device, dtype=self.dtype(shape))}

    def reference(self, shape: Shape, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        rd = ref_dtype_for(inputs["x"].device)
        return {"out": swiglu_mlp_ref(inputs["x"].to(rd), inputs["w13"], inputs["w2"])}

    def stock(self, shape: Shape, m: int) -> KernelFn:
        def stock_shared_expert(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, out: torch.Tensor) -> None:
            # vLLM's DeepseekV2MLP: merged gate_up GEMM, SiluAndMul, down GEMM, all in bf16.
            torch.matmul(silu_mul(torch.matmul(x, w13.t())), w2.t(), out=out)
        return stock_shared_expert

    def check(self, shape: Shape, outputs: dict[str, torch.Tensor], ref: dict[str, torch.Tensor],
              inputs: dict[str, torch.Tensor]) -> CheckOutcome:
        return mlp_check(outputs["out"], ref["out"], self.dtype(shape))

    def bytes_moved(self, shape: Shape, m: int) -> int:
        k, i = shape.dims["K"], shape.dims["I"]
        return (3 * i * k + 2 * m * k) * self.dtype(shape).itemsize

    def flops(self, shape: Shape, m: int) -> int:
        k, i = shape.dims["K"], shape.dims["I"]
        return 6 * m * k * i  # 2*M*2I*K for w13 + 2*M*K*I for w2; silu*mul is O(M*I)
