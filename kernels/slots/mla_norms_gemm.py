"""mla_norms_gemm: both latent norms of the MLA attention input and q_b_proj, in one step.

    out    = (rmsnorm(x) * norm_weight) @ w^T        (q_a_layernorm, then q_b_proj)
    kv_out = rmsnorm(kv) * kv_norm_weight             (kv_a_layernorm of the kv latent)

x and kv are the q and kv latents of the fused_qkv_a output. rmsnorm_gemm covers the first line; stock vLLM then
still runs kv_a_layernorm as its own step, which in a tuned attention block measured 2.9-5 us of about 25
(bench/results/2026-12-06-h100-attn-block-chain-zw-*.json). Both norms read only fused_qkv_a's output, so one
kernel can run both; the slot times and checks them together, as the layer runs them.
"""

from __future__ import annotations

import torch

from kernels.deployment import Deployment
from kernels.slots.add_rmsnorm import ELEM_ATOL_RMS, ELEM_RTOL, rms_norm_native
from kernels.slots.base import (REL_L2_TOL, CheckOutcome, KernelFn, Shape, compare_dense, merge_outcomes, norm_weight,
                                randn, ref_dtype_for, rms_norm)
from kernels.slots.rmsnorm_gemm import RmsNormGemm
from kernels.specs import SpecError


class MlaNormsGemm(RmsNormGemm):
    name = "mla_norms_gemm"
    description = ("out[M,N] = (rmsnorm(x[M,K]) * norm_weight[K]) @ w[N,K]^T and kv_out[M,KV] = rmsnorm(kv[M,KV]) * "
                   "kv_norm_weight[KV] (q_a_layernorm + q_b_proj + kv_a_layernorm); bf16 in and out, fp32 maths")
    rationale = ("stock vLLM runs kv_a_layernorm as its own step, 2.9-5 us of a tuned attention block's ~25 "
                 "(bench/results/2026-12-06-h100-attn-block-chain-zw-*.json); both latent norms read only "
                 "fused_qkv_a's output, so q_b_proj's launch can run both")
    input_names = ("x", "norm_weight", "w", "kv", "kv_norm_weight")
    weight_names = ("norm_weight", "w", "kv_norm_weight")
    output_names = ("out", "kv_out")

    def shapes(self, deployment: Deployment) -> list[Shape]:
        (q_shape,) = super().shapes(deployment)
        kv = deployment.model_spec().kv_lora_rank
        if not kv:
            raise SpecError(f"{deployment.model_spec().name} has no kv_lora_rank: no kv latent to normalise")
        return [Shape(self.name, "q_b_proj_kv_norm", {**q_shape.dims, "KV": kv}, deployment.dtype)]

    def make_inputs(self, shape: Shape, m: int, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        inputs = super().make_inputs(shape, m, seed, device)
        g = torch.Generator().manual_seed(seed + 1_000_003)  # the kv latent's own stream: the q part stays as seeded
        kv, dt = shape.dims["KV"], self.dtype(shape)
        return {**inputs, "kv": randn((m, kv), g, device, dt), "kv_norm_weight": norm_weight(kv, g, device, dt)}

    def alloc_outputs(self, shape: Shape, m: int, device: torch.device) -> dict[str, torch.Tensor]:
        kv_out = torch.empty((m, shape.dims["KV"]), device=device, dtype=self.dtype(shape))
        return {**super().alloc_outputs(shape, m, device), "kv_out": kv_out}

    def reference(self, shape: Shape, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        rd = ref_dtype_for(inputs["kv"].device)
        kv_out = rms_norm(inputs["kv"].to(rd), inputs["kv_norm_weight"], shape.dims["eps"])
        return {**super().reference(shape, inputs), "kv_out": kv_out}

    def stock(self, shape: Shape, m: int) -> KernelFn:
        q_part = super().stock(shape, m)
        eps = shape.dims["eps"]

        def stock_mla_norms_gemm(x: torch.Tensor, norm_weight: torch.Tensor, w: torch.Tensor, kv: torch.Tensor,
                                 kv_norm_weight: torch.Tensor, out: torch.Tensor, kv_out: torch.Tensor) -> None:
            # vLLM's MLA forward: q_a_layernorm -> q_b_proj, kv_a_layernorm, each RMSNorm.forward_native
            q_part(x, norm_weight, w, out)
            kv_out.copy_(rms_norm_native(kv.float(), kv_norm_weight, eps))
        return stock_mla_norms_gemm

    def check(self, shape: Shape, outputs: dict[str, torch.Tensor], ref: dict[str, torch.Tensor],
              inputs: dict[str, torch.Tensor]) -> CheckOutcome:
        kv = compare_dense("kv_out", outputs["kv_out"], ref["kv_out"], rel_l2_tol=REL_L2_TOL[self.dtype(shape)],
                           elem_rtol=ELEM_RTOL, elem_atol_rms=ELEM_ATOL_RMS)  # a norm output, as add_rmsnorm's
        return merge_outcomes([super().check(shape, outputs, ref, inputs), kv])

    def bytes_moved(self, shape: Shape, m: int) -> int:
        kv = shape.dims["KV"]
        return super().bytes_moved(shape, m) + (2 * m * kv + kv) * self.dtype(shape).itemsize  # kv, its weight; kv_out

    def flops(self, shape: Shape, m: int) -> int:
        return super().flops(shape, m) + 4 * m * shape.dims["KV"]
