"""The slot catalogue: every slot by name (DESIGN.md, 'Slot catalogue')."""

from __future__ import annotations

from kernels.slots.base import Slot

LANGUAGES = ("torch", "triton", "cute")


class UnknownSlot(KeyError):
    pass


def _build() -> dict[str, Slot]:
    from kernels.slots.add_rmsnorm import AddRmsNorm
    from kernels.slots.dense_gemm import DenseGemm
    from kernels.slots.mla_norms_gemm import MlaNormsGemm
    from kernels.slots.moe_experts import MoeExperts
    from kernels.slots.moe_experts_shared import MoeExpertsShared
    from kernels.slots.oproj_residual_norm import OprojResidualNorm
    from kernels.slots.rmsnorm_gemm import RmsNormGemm
    from kernels.slots.router import Router
    from kernels.slots.shared_expert import SharedExpert

    slots: list[Slot] = [DenseGemm(), Router(), MoeExperts(), SharedExpert(), OprojResidualNorm(), AddRmsNorm(),
                         RmsNormGemm(), MlaNormsGemm(), MoeExpertsShared()]
    return {s.name: s for s in slots}


_SLOTS: dict[str, Slot] | None = None


def all_slots() -> dict[str, Slot]:
    global _SLOTS
    if _SLOTS is None:
        _SLOTS = _build()
    return _SLOTS


def get_slot(name: str) -> Slot:
    try:
        return all_slots()[name]
    except KeyError:
        raise UnknownSlot(f"unknown slot {name!r}; known: {', '.join(sorted(all_slots()))}") from None
