"""GET /v1/slots, /v1/slots/{name}, /v1/models: what can be tuned, for which deployment."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query

from kernels.catalogue import UnknownSlot, all_slots, get_slot
from kernels.deployment import DEFAULT_BATCHES, Deployment
from kernels.specs import SpecError, builtin_names, builtin_spec
from service.errors import ERROR_RESPONSES, invalid, not_found
from service.schemas import ModelOut, ShapeOut, SlotOut, SlotShapes

router = APIRouter(prefix="/v1", tags=["catalogue"], responses=ERROR_RESPONSES)


@router.get("/slots", response_model=list[SlotOut])
def list_slots() -> list[SlotOut]:
    return [SlotOut.model_validate(s.describe()) for _, s in sorted(all_slots().items())]


@router.get("/slots/{name}", response_model=SlotShapes)
def slot_shapes(name: str, model: str = Query("kimi-k2-like", description="built-in model spec name"),
                tp: int = Query(8, ge=1, le=64), dtype: Literal["bfloat16", "float16"] = "bfloat16",
                draft_tokens: int = Query(0, ge=0, le=15),
                batch_sizes: list[int] | None = Query(None, description="defaults to 1, 2, 4, ..., 64")) -> SlotShapes:
    try:
        slot = get_slot(name)
    except UnknownSlot as exc:
        raise not_found("slot", f"{name!r} ({exc.args[0].split('; ', 1)[-1]})") from None
    try:
        dep = Deployment(spec=model, tp=tp, dtype=dtype, draft_tokens=draft_tokens,
                         batch_sizes=batch_sizes or list(DEFAULT_BATCHES))
        shapes = slot.shapes(dep)
    except (ValueError, SpecError) as exc:  # pydantic's ValidationError is a ValueError
        raise invalid(f"deployment: {exc}") from None
    return SlotShapes(slot=name, model=model, tp=tp, dtype=dtype, draft_tokens=draft_tokens,
                      token_counts=dep.token_counts(),
                      shapes=[ShapeOut(name=s.name, key=s.key, dims=s.dims, dtype=s.dtype) for s in shapes])


@router.get("/models", response_model=list[ModelOut])
def list_models() -> list[ModelOut]:
    out = []
    for name in builtin_names():
        spec = builtin_spec(name)
        out.append(ModelOut(name=name, verified=spec.verified, notes=spec.notes,
                            spec=spec.model_dump(exclude={"name", "verified", "notes"})))
    return out
