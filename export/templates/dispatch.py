"""Runtime choice of a kernel: ``dispatch(slot, shape_key, M) -> fn(**inputs, **outputs)``.

The tuned kernel of M's batch bucket when this machine matches the hardware the evidence was
measured on; otherwise, or outside the tuned buckets, the stock torch kernel (explicit fallback,
never an error). Stock also at the M of a bucket where the kernel's runs measured it slower than stock (the entry's
"stock_ms"), and with KT_LS_CHECKED_M_ONLY=1 at the M of a bucket that its kernel's evidence did not check.
``explain`` says which one and why without building anything.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import os
import platform
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, Callable

import torch

from . import aot, reference

KernelFn = Callable[..., None]
# Languages that run only on a CUDA device (the torch ones run anywhere).
GPU_LANGUAGES = ("triton", "cute")
# The chain level the vLLM hooks build their kernels at (dispatch's pdl): 0, the default, is off.
PDL_ENV = "KT_LS_PDL"
# 1: a tuned kernel runs only at the M its evidence checked (manifest "ms": its runs, bucket checks included), stock
# at the bucket's other M; unset or 0: at every M of its bucket (``selftest --every-m`` checks those on this machine).
CHECKED_ONLY_ENV = "KT_LS_CHECKED_M_ONLY"
_HARDWARE_CLASSES = ("gb300", "gb200", "b300", "b200", "h200", "h100", "h20", "a100", "l40s")


@functools.cache
def dispatch_table() -> dict[str, Any]:
    return json.loads(resources.files(__package__).joinpath("dispatch.json").read_text())


@functools.cache
def manifest() -> dict[str, Any]:
    return json.loads(resources.files(__package__).joinpath("manifest.json").read_text())


def hardware_class(device_name: str) -> str:
    """The same mapping kerneltune's workers use for queue names ("NVIDIA H200" -> "h200")."""
    low = device_name.lower().replace("nvidia", "").replace(" ", "")
    for cls in _HARDWARE_CLASSES:
        if cls in low:
            return cls
    return re.sub(r"[^a-z0-9]+", "", low)[:16] or "gpu"


def local_hardware() -> dict[str, str]:
    """Class and arch of this machine's first CUDA device, or of the CPU when there is none."""
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        return {"hardware_class": hardware_class(p.name), "arch": f"sm_{p.major}{p.minor}", "name": p.name}
    return {"hardware_class": "cpu", "arch": platform.machine(), "name": platform.processor() or platform.machine()}


def hardware_mismatch() -> str | None:
    """None when this machine is the hardware the package was tuned on, else the reason it is not.
    KT_LS_ASSUME_HARDWARE=1 skips the check (for a machine the fingerprint does not describe)."""
    if os.environ.get("KT_LS_ASSUME_HARDWARE") == "1":
        return None
    want = manifest()["hardware"]
    have = local_hardware()
    if have["hardware_class"] != want["hardware_class"]:
        return f"this machine is {have['hardware_class']!r} ({have['name']}), the package is tuned for {want['hardware_class']!r}"
    archs = want.get("archs") or []
    if archs and have["arch"] not in archs:
        return f"this machine's arch is {have['arch']}, the package's evidence is for {', '.join(archs)}"
    return None


def batch_bucket(m: int) -> str:
    for lo, hi in dispatch_table()["buckets"]:
        if lo <= m <= hi:
            return str(lo) if lo == hi else f"{lo}-{hi}"
    raise ValueError(f"M={m} outside the bucket table")


@dataclass(frozen=True)
class Choice:
    slot: str
    shape_key: str
    m: int
    kind: str  # "tuned" or "stock"
    reason: str
    module: str | None = None
    language: str | None = None
    config: str | None = None  # canonical JSON: hashable, so builds can be cached

    def config_dict(self) -> dict[str, Any]:
        return json.loads(self.config) if self.config else {}


def _shape(slot: str, shape_key: str) -> dict[str, Any]:
    try:
        return dispatch_table()["slots"][slot][shape_key]["shape"]
    except KeyError:
        raise KeyError(f"no shape {shape_key!r} of slot {slot!r} in this package; known: "
                       f"{sorted(dispatch_table()['slots'].get(slot, {}))}") from None


def build_arg(slot: str, shape_key: str, m: int) -> dict[str, Any]:
    """What a variant's build() receives: the shape's dims plus M, slot, name and dtype."""
    s = _shape(slot, shape_key)
    return {**s["dims"], "M": m, "slot": s["slot"], "name": s["name"], "dtype": s["dtype"]}


def explain(slot: str, shape_key: str, m: int) -> Choice:
    slots = dispatch_table()["slots"]
    if slot not in slots or shape_key not in slots[slot]:
        return Choice(slot, shape_key, m, "stock", f"no tuned entry for {slot} {shape_key}")
    try:
        bucket = batch_bucket(m)
    except ValueError as exc:
        return Choice(slot, shape_key, m, "stock", str(exc))
    entry = slots[slot][shape_key]["buckets"].get(bucket)
    if entry is None:
        return Choice(slot, shape_key, m, "stock", f"M={m} (bucket {bucket}) is outside the tuned range")
    if entry.get("stock"):
        return Choice(slot, shape_key, m, "stock", f"bucket {bucket}: nothing beat the stock kernel")
    if m in entry.get("stock_ms", ()):
        return Choice(slot, shape_key, m, "stock", f"bucket {bucket}'s kernel was measured slower than stock at M={m}")
    if os.environ.get(CHECKED_ONLY_ENV) == "1" and m not in entry.get("ms", ()):
        return Choice(slot, shape_key, m, "stock", f"bucket {bucket}'s kernel was checked at M={entry.get('ms')} only "
                                                   f"and {CHECKED_ONLY_ENV}=1")
    mismatch = hardware_mismatch()
    if mismatch:
        return Choice(slot, shape_key, m, "stock", mismatch)
    if entry["language"] in GPU_LANGUAGES and not torch.cuda.is_available():
        return Choice(slot, shape_key, m, "stock", f"needs {entry['language']} on a GPU")
    return Choice(slot, shape_key, m, "tuned", f"bucket {bucket}", entry["module"], entry["language"],
                  json.dumps(entry["config"], sort_keys=True))


def pdl_level() -> int:
    """The chain level asked for by env KT_LS_PDL (0 when unset)."""
    value = os.environ.get(PDL_ENV, "0")
    if value not in ("0", "1", "2"):
        raise ValueError(f"{PDL_ENV}={value!r}: one of 0 (off), 1 (chained), 2 (chained, weights into L2 first)")
    return int(value)


def _module(name: str) -> Any:
    return importlib.import_module(f"{__package__}.kernels.{name}")


def can_chain(module: Any) -> bool:
    """Whether this kernel module can be built as a link of a chain here: its build takes pdl, on an sm_90+ GPU."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        return False
    return "pdl" in inspect.signature(module.build).parameters


def chainable(choice: Choice) -> bool:
    """Whether dispatch(..., pdl=1 or 2) gives this choice as a link of a chain of programmatic dependent launches:
    a tuned kernel that can_chain(). Everything else is built plainly, which is always correct in a chain (a plain
    launch waits for all that came before it)."""
    return choice.kind == "tuned" and can_chain(_module(str(choice.module)))


def _entry(slot: str, shape_key: str, m: int) -> dict[str, Any]:
    return dispatch_table()["slots"][slot][shape_key]["buckets"][batch_bucket(m)]


def build_tuned(slot: str, shape_key: str, m: int, pdl: int = 0) -> tuple[KernelFn, str]:
    """The tuned kernel of (slot, shape, M) built at chain level ``pdl`` (0: plain), whatever explain() says, and
    how: "aot" (the package's ahead-of-time build, see aot.py), "jit: why not aot" (compiled here now), or "torch"."""
    entry = _entry(slot, shape_key, m)
    module = _module(entry["module"])
    config, arg = dict(entry["config"]), build_arg(slot, shape_key, m)
    kw = {"pdl": pdl} if pdl else {}
    if entry["language"] not in GPU_LANGUAGES:
        return module.build(config, arg, **kw), "torch"
    if entry["language"] != "cute":
        return module.build(config, arg, **kw), "jit: no ahead-of-time builds for this language"
    built = entry.get("aot") or {}
    spec = aot.spec_for(built, m, pdl)
    why = aot.unusable(spec, built.get("host"), pdl)
    if why:
        return module.build(config, arg, **kw), f"jit: {why}"
    return aot.build(module, config, arg, spec, pdl)


@functools.cache
def _build(choice: Choice, pdl: int = 0) -> KernelFn:
    if choice.kind == "stock":
        return reference.semantics(choice.slot).stock(build_arg(choice.slot, choice.shape_key, choice.m))
    return build_tuned(choice.slot, choice.shape_key, choice.m, pdl if chainable(choice) else 0)[0]


def dispatch(slot: str, shape_key: str, m: int, pdl: int = 0) -> KernelFn:
    """The kernel for (slot, shape, M): built once per (choice, M, pdl) and cached.

    pdl 1 (sm_90+) builds it as a link of a chain: a programmatic dependent launch that lets the next kernel
    launch at once and reads nothing but its weights until the kernel before it has finished
    (griddepcontrol.wait); 2 also asks its weights into L2 before that wait. It must only be used where no
    earlier kernel writes this kernel's weights (inference). chainable() says whether a choice can be chained;
    one that cannot is built plainly."""
    if pdl not in (0, 1, 2):
        raise ValueError(f"pdl={pdl!r}: one of 0, 1, 2")
    return _build(explain(slot, shape_key, m), pdl)


def stock(slot: str, shape_key: str, m: int) -> KernelFn:
    return _build(Choice(slot, shape_key, m, "stock", "asked for stock"))


def tuned_entries() -> list[dict[str, Any]]:
    """Every tuned (slot, shape, bucket) with its variant, config and the batch sizes measured."""
    rows = []
    for slot, shapes in sorted(dispatch_table()["slots"].items()):
        for shape_key, spec in sorted(shapes.items()):
            for bucket, entry in spec["buckets"].items():
                if not entry.get("stock"):
                    rows.append({"slot": slot, "shape_key": shape_key, "bucket": bucket, **entry})
    return rows
