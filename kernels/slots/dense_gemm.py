"""dense_gemm: y = x . W^T for the attention projections and lm_head at small M."""

from __future__ import annotations

import torch

from kernels.deployment import Deployment
from kernels.slots.base import (REL_L2_TOL, CheckOutcome, KernelFn, Shape, Slot, compare_dense, randn,
                                ref_dtype_for, weight)
from kernels.specs import SpecError


class DenseGemm(Slot):
    name = "dense_gemm"
    description = "y[M,N] = x[M,K] @ w[N,K]^T (fused_qkv_a, q_b_proj, o_proj, lm_head), bf16 in and out, fp32 accumulate"
    input_names = ("x", "w")
    weight_names = ("w",)
    output_names = ("out",)

    def shapes(self, deployment: Deployment) -> list[Shape]:
        s = deployment.model_spec()
        tp = deployment.tp
        qk_head = s.qk_nope_head_dim + s.qk_rope_head_dim
        if s.num_attention_heads % tp:
            raise SpecError(f"{s.num_attention_heads} heads do not split over TP={tp}")
        if s.vocab_size % tp:
            raise SpecError(f"vocab {s.vocab_size} does not split over TP={tp}")
        heads = s.num_attention_heads // tp
        dt = deployment.dtype
        out: list[Shape] = []
        if s.q_lora_rank:
            # fused_qkv_a is replicated on every rank: q_a, kv_a and the rope key in one GEMM.
            out.append(Shape(self.name, "fused_qkv_a", {"N": s.q_lora_rank + s.kv_lora_rank + s.qk_rope_head_dim,
                                                       "K": s.hidden_size}, dt))
            out.append(Shape(self.name, "q_b_proj", {"N": heads * qk_head, "K": s.q_lora_rank}, dt))
        else:
            out.append(Shape(self.name, "kv_a_proj", {"N": s.kv_lora_rank + s.qk_rope_head_dim, "K": s.hidden_size}, dt))
            out.append(Shape(self.name, "q_proj", {"N": heads * qk_head, "K": s.hidden_size}, dt))
        out.append(Shape(self.name, "o_proj", {"N": s.hidden_size, "K": heads * s.v_head_dim}, dt))
        out.append(Shape(self.name, "lm_head", {"N": s.vocab_size // tp, "K": s.hidden_size}, dt))
        return out

    def make_inputs(self, shape: Shape, m: int, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        n, k = shape.dims["N"], shape.dims["K"]
        dt = self.dtype(shape)
        return {"x": randn((m, k), g, device, dt), "w": weight((n, k), k, g, device, dt)}

    def alloc_outputs(self, shape: Shape, m: int, device: torch.device) -> dict[str, torch.Tensor]:
        return {"out": torch.empty((m, shape.dims["N"]), device=device, dtype=self.dtype(shape))}

    def reference(self, shape: Shape, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        rd = ref_dtype_for(inputs["x"].device)
        return {"out": inputs["x"].to(rd) @ inputs["w"].to(rd).t()}

    def stock(self, shape: Shape, m: int) -> KernelFn:
        def stock_gemm(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
            torch.matmul(x, w.t(), out=out)
        return stock_gemm

    def check(self, shape: Shape, outputs: dict[str, torch.Tensor], ref: dict[str, torch.Tensor],
              inputs: dict[str, torch.Tensor]) -> CheckOutcome:
        dt = self.dtype(shape)
        # bf16 output rounding is 2^-9 relative; accumulation-order differences add a little on
        # top, scaled by the output's rms for elements that cancel to near zero.
        return compare_dense("out", outputs["out"], ref["out"], rel_l2_tol=REL_L2_TOL[dt],
                             elem_rtol=2e-2, elem_atol_rms=2e-2)

    def bytes_moved(self, shape: Shape, m: int) -> int:
        n, k = shape.dims["N"], shape.dims["K"]
        es = self.dtype(shape).itemsize
        return (n * k + m * k + m * n) * es

    def flops(self, shape: Shape, m: int) -> int:
        return 2 * m * shape.dims["N"] * shape.dims["K"]
