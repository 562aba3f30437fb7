"""TP forms of the collective slots: the same slot interface, computed by ``world_size`` ranks.

A TP slot wraps a TP=1 slot (kernels/slots/) and keeps its calling convention, output shapes and
correctness rule. What changes is where the data lives: every rank builds the *full* single-device
problem from the run's seed (so all ranks agree on it without moving it), keeps only its shard as
inputs, and must return the full outputs, identical on every rank. The check compares each rank's
outputs with the single-device reference of the full problem.

The shape a TP run gets is the TP=1 slot's per-rank shape at TP = world_size (what a deployment's
``shapes()`` gives): o_proj's K is already the per-rank K, the router's E is all experts (the gate
is replicated in stock vLLM; its TP form splits it).

A TP variant module defines ``build(config, shape, comm=None) -> fn``. With ``comm=None`` it must
compute the TP=1 maths, so the same source also runs as an ordinary single-device variant of the
slot; with a ``TPComm`` it runs as one rank of the group. ``shape`` carries ``tp`` and ``rank``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from kernels.slots.base import CheckOutcome, KernelFn, Shape, Slot

Tensors = dict[str, torch.Tensor]
# torch >= 2.13 renames all_gather_into_tensor (same semantics); older releases only have the old name.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


@dataclass(frozen=True)
class TPComm:
    """What a TP variant may use to talk to the other ranks (duck-typed: an exported variant needs
    only these attributes, not kerneltune)."""

    rank: int
    world_size: int
    device: torch.device
    group: Any = None  # a torch.distributed ProcessGroup; None: the default group

    def all_reduce_(self, t: torch.Tensor) -> torch.Tensor:
        """Sum over ranks, in place."""
        dist.all_reduce(t, group=self.group)
        return t

    def all_gather(self, t: torch.Tensor) -> torch.Tensor:
        """[world_size, *t.shape], rank order. One collective into one buffer: gloo wants the output
        concatenated along dim 0 (it rejects a [world, ...] view), NCCL accepts both."""
        t = t.contiguous() if t.dim() else t.reshape(1)
        out = torch.empty((self.world_size * t.shape[0], *t.shape[1:]), dtype=t.dtype, device=t.device)
        _all_gather_single(out, t, group=self.group)
        return out.view(self.world_size, *t.shape)


class TPSlot(ABC):
    """The TP form of ``base``: sharding, the TP stock baseline, cross-rank agreement."""

    name: str           # the TP form's own name (records, reports)
    base: Slot          # the TP=1 slot: interface, reference and check rule
    description: str

    @abstractmethod
    def full_shape(self, shape: Shape, world: int) -> Shape:
        """The single-device problem the group computes together."""

    @abstractmethod
    def shard(self, full_inputs: Tensors, shape: Shape, rank: int, world: int) -> Tensors:
        """This rank's inputs (contiguous copies: a variant must not reach the other ranks' data)."""

    @abstractmethod
    def stock(self, shape: Shape, m: int, comm: TPComm) -> KernelFn:
        """The unfused TP baseline, same calling convention as a variant."""

    @abstractmethod
    def comm_bytes(self, shape: Shape, m: int, world: int) -> int:
        """Bytes one rank contributes to the stock path's collectives (what the fusion may save)."""

    def rank_bytes(self, shape: Shape, m: int, world: int) -> int:
        """Fewest bytes one rank's call must move (its shard in, the full outputs out)."""
        return self.base.bytes_moved(shape, m)

    def validate(self, shape: Shape, world: int) -> None:
        """Raise ValueError when this shape cannot be split over ``world`` ranks."""
        self.full_shape(shape, world)

    def build_arg(self, shape: Shape, m: int, rank: int, world: int) -> dict[str, Any]:
        return {**shape.as_build_arg(m), "tp": world, "rank": rank}

    def make_full_inputs(self, shape: Shape, m: int, seed: int, world: int, device: torch.device) -> Tensors:
        return self.base.make_inputs(self.full_shape(shape, world), m, seed, device)

    def alloc_outputs(self, shape: Shape, m: int, world: int, device: torch.device) -> Tensors:
        return self.base.alloc_outputs(self.full_shape(shape, world), m, device)

    def reference(self, shape: Shape, world: int, full_inputs: Tensors) -> Tensors:
        return self.base.reference(self.full_shape(shape, world), full_inputs)

    def check(self, shape: Shape, world: int, outputs: Tensors, ref: Tensors, full_inputs: Tensors) -> CheckOutcome:
        return self.base.check(self.full_shape(shape, world), outputs, ref, full_inputs)

    def canonical(self, outputs: Tensors) -> Tensors:
        """Outputs in the form that must be bit-identical across ranks."""
        return outputs

    def replicated_baseline(self, shape: Shape, m: int) -> KernelFn | None:
        """A baseline that needs no collective (each rank computes everything from the full inputs),
        when the stock deployment does that today; None when there is none."""
        return None


def tp_slots() -> dict[str, TPSlot]:
    """TP forms by the TP=1 slot name a RunSpec carries."""
    from kernels.tp.oproj_allreduce_norm import OprojAllreduceNorm
    from kernels.tp.router_split import RouterSplit

    forms: list[TPSlot] = [OprojAllreduceNorm(), RouterSplit()]
    return {f.base.name: f for f in forms}


def get_tp_slot(slot_name: str) -> TPSlot:
    forms = tp_slots()
    try:
        return forms[slot_name]
    except KeyError:
        raise KeyError(f"slot {slot_name!r} has no TP form; TP forms exist for {', '.join(sorted(forms))}") from None
