"""The slot interface: one replaceable step of the decode layer.

Calling convention shared by stock baselines and every variant: ``fn(**inputs, **outputs)``;
the callable writes every element of the preallocated outputs and returns nothing. A variant
module defines ``build(config: dict, shape: dict) -> fn`` where ``shape`` is ``Shape.as_build_arg(m)``
(the slot's dims plus ``M``, ``slot``, ``name``, ``dtype``), so a build is specialised per batch.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from kernels.deployment import Deployment

KernelFn = Callable[..., None]

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}

# ||out - ref|| / ||ref|| bounds by output dtype (DESIGN.md: bf16 passes at 1e-2).
REL_L2_TOL = {torch.bfloat16: 1e-2, torch.float16: 5e-3, torch.float32: 1e-4}


@dataclass(frozen=True)
class Shape:
    """One shape a deployment gives a slot (batch excluded: M varies per run)."""

    slot: str
    name: str
    dims: dict[str, Any]
    dtype: str = "bfloat16"

    @property
    def key(self) -> str:
        dims = ",".join(f"{k}={v}" for k, v in sorted(self.dims.items()))
        return f"{self.name}[{dims}]"

    def as_build_arg(self, m: int) -> dict[str, Any]:
        return {**self.dims, "M": m, "slot": self.slot, "name": self.name, "dtype": self.dtype}

    def to_json(self) -> dict[str, Any]:
        return {"slot": self.slot, "name": self.name, "dims": dict(self.dims), "dtype": self.dtype}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Shape":
        return cls(slot=data["slot"], name=data["name"], dims=dict(data["dims"]), dtype=data.get("dtype", "bfloat16"))


@dataclass
class CheckOutcome:
    passed: bool
    reason: str = ""
    rel_l2: float | None = None
    max_abs_err: float | None = None
    mismatches: list[dict[str, Any]] = field(default_factory=list)  # first few offending elements

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "reason": self.reason, "rel_l2": self.rel_l2,
                "max_abs_err": self.max_abs_err, "mismatches": self.mismatches}


def ref_dtype_for(device: torch.device) -> torch.dtype:
    """fp64 on the CPU, fp32 on a device (DESIGN.md evaluation protocol)."""
    return torch.float64 if device.type == "cpu" else torch.float32


DEVICE_DRAW_MIN = 1 << 20  # elements; below this drawing on the host is cheap


def draws_on_device(device: torch.device, numel: int) -> bool:
    """Whether randn draws a tensor of numel elements for device on that device (the exported package's
    reference.py applies the same rule, so a seed gives both the same inputs on a GPU too)."""
    return device.type != "cpu" and numel >= DEVICE_DRAW_MIN


def randn(shape: tuple[int, ...], gen: torch.Generator, device: torch.device, dtype: torch.dtype,
          std: float = 1.0) -> torch.Tensor:
    if not draws_on_device(device, math.prod(shape)):
        # Drawn on the CPU from the seeded generator: a seed means the same inputs on every device.
        t = torch.randn(shape, generator=gen, dtype=torch.float32) * std
        return t.to(device=device, dtype=dtype)
    # Large tensors (K2 expert weights: billions of values) are drawn on the device itself, seeded
    # from the CPU generator: still deterministic in the seed, without hours of host-side sampling.
    dev_gen = torch.Generator(device=device)
    dev_gen.manual_seed(int(torch.randint(0, 2**62, (1,), generator=gen)))
    t = torch.randn(shape, generator=dev_gen, device=device, dtype=torch.float32)
    return (t * std).to(dtype)


def weight(shape: tuple[int, ...], fan_in: int, gen: torch.Generator, device: torch.device,
           dtype: torch.dtype) -> torch.Tensor:
    """Weights ~ N(0, 1/K): realistic scale, never zeros."""
    return randn(shape, gen, device, dtype, std=1.0 / math.sqrt(fan_in))


def first_mismatches(out: torch.Tensor, ref: torch.Tensor, bad: torch.Tensor, limit: int = 5) -> list[dict[str, Any]]:
    idx = bad.nonzero()[:limit].tolist()
    rows = []
    for i in idx:
        o = out[tuple(i)].item()
        r = ref[tuple(i)].item()
        rows.append({"index": i, "got": o, "expected": r})
    return rows


def compare_dense(name: str, out: torch.Tensor, ref: torch.Tensor, *, rel_l2_tol: float,
                  elem_rtol: float, elem_atol_rms: float) -> CheckOutcome:
    """Dense-output rule: no NaN/Inf, relative L2 under ``rel_l2_tol``, and every element within
    ``elem_rtol * |ref| + elem_atol_rms * rms(ref)`` (catches a single wrong corner element that
    the L2 norm would average away)."""
    o = out.detach().to(device="cpu", dtype=torch.float64)
    r = ref.detach().to(device="cpu", dtype=torch.float64)
    if o.shape != r.shape:
        return CheckOutcome(False, f"{name}: shape {tuple(o.shape)} != expected {tuple(r.shape)}")
    if not torch.isfinite(r).all():
        # The reference must never act as a wildcard: a non-finite expected value is a harness error.
        raise RuntimeError(f"{name}: reference is not finite")
    nonfinite = ~torch.isfinite(o)
    if nonfinite.any():
        n = int(nonfinite.sum())
        return CheckOutcome(False, f"{name}: {n} of {o.numel()} elements NaN/Inf (unwritten outputs stay NaN)",
                            mismatches=first_mismatches(o, r, nonfinite))
    diff = (o - r).abs()
    ref_norm = r.norm().item()
    rel = (o - r).norm().item() / max(ref_norm, 1e-30)
    rms = ref_norm / math.sqrt(max(r.numel(), 1))
    bound = elem_rtol * r.abs() + elem_atol_rms * rms
    bad = diff > bound
    max_abs = diff.max().item() if diff.numel() else 0.0
    if rel > rel_l2_tol:
        return CheckOutcome(False, f"{name}: relative L2 error {rel:.3e} > {rel_l2_tol:.0e}", rel, max_abs,
                            first_mismatches(o, r, bad if bad.any() else diff >= max_abs))
    if bad.any():
        n = int(bad.sum())
        return CheckOutcome(False, f"{name}: {n} elements outside |err| <= {elem_rtol}*|ref| + {elem_atol_rms}*rms(ref)",
                            rel, max_abs, first_mismatches(o, r, bad))
    return CheckOutcome(True, "", rel, max_abs)


def merge_outcomes(outcomes: list[CheckOutcome]) -> CheckOutcome:
    failed = [o for o in outcomes if not o.passed]
    if failed:
        return failed[0]
    rels = [o.rel_l2 for o in outcomes if o.rel_l2 is not None]
    abss = [o.max_abs_err for o in outcomes if o.max_abs_err is not None]
    return CheckOutcome(True, "", max(rels) if rels else None, max(abss) if abss else None)


class Slot(ABC):
    """A step of the decode layer with its shapes, reference, stock baseline and correctness rule."""

    name: str
    description: str
    input_names: tuple[str, ...]
    weight_names: tuple[str, ...]  # inputs that are model weights: rotated in the bench stage
    output_names: tuple[str, ...]
    # False when the stock baseline syncs with the host (e.g. a loop over the routed experts): the CUDA
    # timer then times it eagerly instead of in a graph (a variant must always capture).
    stock_capturable: bool = True
    # Why the slot exists, for those DESIGN.md's catalogue does not list (docs/slots.md prints it).
    rationale: str = ""

    @abstractmethod
    def shapes(self, deployment: Deployment) -> list[Shape]:
        """Every shape this deployment gives the slot on one TP rank."""

    @abstractmethod
    def make_inputs(self, shape: Shape, m: int, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        """Fresh random inputs and weights for one trial (deterministic in ``seed``)."""

    @abstractmethod
    def alloc_outputs(self, shape: Shape, m: int, device: torch.device) -> dict[str, torch.Tensor]:
        """Output buffers, uninitialised (the harness poisons them)."""

    @abstractmethod
    def reference(self, shape: Shape, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The exact answer in high precision (fp64 on the CPU, fp32 on a device)."""

    @abstractmethod
    def stock(self, shape: Shape, m: int) -> KernelFn:
        """The stock baseline (what vLLM runs today), same calling convention as a variant."""

    @abstractmethod
    def check(self, shape: Shape, outputs: dict[str, torch.Tensor], ref: dict[str, torch.Tensor],
              inputs: dict[str, torch.Tensor]) -> CheckOutcome:
        """The slot's correctness rule."""

    @abstractmethod
    def bytes_moved(self, shape: Shape, m: int) -> int:
        """Fewest bytes the step must move through memory (each input read once, outputs written once)."""

    @abstractmethod
    def flops(self, shape: Shape, m: int) -> int:
        """Floating-point operations the step must do."""

    def input_sets(self, shape: Shape, m: int, seed: int, device: torch.device, n_sets: int) -> list[dict[str, torch.Tensor]]:
        """Independent input sets for the bench stage to rotate over (defeats cache reuse).
        Slots whose weights are large by themselves (moe_experts) share weights across sets."""
        return [self.make_inputs(shape, m, seed + i, device) for i in range(n_sets)]

    def dtype(self, shape: Shape) -> torch.dtype:
        return DTYPES[shape.dtype]

    def poison(self, outputs: dict[str, torch.Tensor]) -> None:
        """NaN into float outputs, an impossible value into integer ones: every element must be written."""
        for t in outputs.values():
            if t.is_floating_point():
                t.fill_(float("nan"))
            else:
                t.fill_(-1)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "inputs": list(self.input_names),
                "weights": list(self.weight_names), "outputs": list(self.output_names),
                "rationale": self.rationale}


# --- helpers shared by several slots -------------------------------------------------------------

def norm_weight(n: int, gen: torch.Generator, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """An RMSNorm weight: values around 1 but not all ones (all ones would hide a missing multiply)."""
    t = 0.5 + torch.rand((n,), generator=gen, dtype=torch.float32)  # uniform in [0.5, 1.5)
    return t.to(device=device, dtype=dtype)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """rmsnorm(x) * weight over the last dim, in x's dtype (callers pass a high-precision x)."""
    w = weight.to(x.dtype)
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * w


def silu_mul(h: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up where h = [gate | up] along the last dim (vLLM's SiluAndMul)."""
    i = h.shape[-1] // 2
    return torch.nn.functional.silu(h[..., :i]) * h[..., i:]
