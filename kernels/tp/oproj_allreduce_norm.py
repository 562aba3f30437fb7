"""oproj_residual_norm, TP form: o_proj split along K, all-reduce, residual add, RMSNorm.

Rank r holds a[:, K_r] and w[:, K_r] (K_r: its heads' v_head_dim columns, as vLLM's
RowParallelLinear) plus the replicated residual and norm weight. Each rank's partial a_r @ w_r^T
sums to the full o_proj; every rank returns the full (out, residual_out), bit-identical across
ranks, checked against the single-device reference of the full o_proj (fp64 on the CPU).

Stock (vLLM today): bf16 GEMM, NCCL/custom all-reduce of the bf16 partial, then the residual add
and RMSNorm as separate unfused ops. The fused forms (kernels/variants/tp/) apply the add and the
norm in the reduction's epilogue.
"""

from __future__ import annotations

import torch

from kernels.slots.add_rmsnorm import rms_norm_native
from kernels.slots.base import KernelFn, Shape
from kernels.slots.oproj_residual_norm import OprojResidualNorm
from kernels.tp import Tensors, TPComm, TPSlot


def k_range(k_full: int, rank: int, world: int) -> slice:
    per = k_full // world
    return slice(rank * per, (rank + 1) * per)


class OprojAllreduceNorm(TPSlot):
    name = "oproj_allreduce_norm"
    base = OprojResidualNorm()
    description = ("TP o_proj: partial a[:, K_r] @ w[:, K_r]^T, all-reduce (sum), residual add, RMSNorm; "
                   "outputs (out, residual_out) on every rank")

    def full_shape(self, shape: Shape, world: int) -> Shape:
        if world < 1:
            raise ValueError(f"world size {world} < 1")
        return Shape(shape.slot, shape.name, {**shape.dims, "K": shape.dims["K"] * world}, shape.dtype)

    def shard(self, full_inputs: Tensors, shape: Shape, rank: int, world: int) -> Tensors:
        ks = k_range(full_inputs["a"].shape[1], rank, world)
        return {"a": full_inputs["a"][:, ks].contiguous(), "w": full_inputs["w"][:, ks].contiguous(),
                "residual": full_inputs["residual"].clone(), "norm_weight": full_inputs["norm_weight"].clone()}

    def stock(self, shape: Shape, m: int, comm: TPComm) -> KernelFn:
        eps = shape.dims["eps"]

        def stock_oproj_allreduce_norm(a: torch.Tensor, w: torch.Tensor, residual: torch.Tensor,
                                       norm_weight: torch.Tensor, out: torch.Tensor,
                                       residual_out: torch.Tensor) -> None:
            partial = torch.matmul(a, w.t())          # bf16, as RowParallelLinear returns it
            comm.all_reduce_(partial)                 # tensor_model_parallel_all_reduce, bf16
            r = partial.float() + residual.float()    # RMSNorm.forward_native(x, residual), unfused
            residual_out.copy_(r)
            out.copy_(rms_norm_native(r, norm_weight, eps))
        return stock_oproj_allreduce_norm

    def comm_bytes(self, shape: Shape, m: int, world: int) -> int:
        return m * shape.dims["N"] * self.base.dtype(shape).itemsize  # the bf16 partial
