"""Tamper guard: identities of the harness' timing, statistics and checking code, captured before
the variant is imported and compared after each step it ran in.

A variant runs in the harness' process, so it *can* rebind ``time.perf_counter_ns``,
``torch.cuda.Event.elapsed_time``, ``workers.stats.summarize``, a slot's ``check`` or ``torch.matmul``
(to slow the stock baseline). The harness calls references it bound before the import, and any
rebinding rejects the run. ``verify`` is a closure: patching this module does not disarm it.
"""

from __future__ import annotations

import inspect
import types
from typing import Any, Callable

_PLAIN = (int, float, str, bool, bytes, type(None))


class Tampered(Exception):
    def __init__(self, names: list[str]):
        super().__init__(", ".join(names[:8]) + (f" (+{len(names) - 8} more)" if len(names) > 8 else ""))
        self.names = names

    @property
    def reason_code(self) -> str:
        timing = ("time.", "workers.stats", "workers.timers", "workers.bench", "torch.cuda.Event",
                  "torch.cuda.streams.Event", "torch.cuda.CUDAGraph", "torch.cuda.graphs.CUDAGraph",
                  "torch.cuda.synchronize", "numpy.")
        return "timer_tampered" if any(n.startswith(timing) for n in self.names) else "harness_tampered"


def _plain_repr(value: Any) -> str | None:
    """A fingerprint of module-level data (tolerances, tables) that a variant could loosen in place."""
    if isinstance(value, _PLAIN):
        return repr(value)
    if isinstance(value, (dict, list, tuple, frozenset)) and len(value) <= 256:
        return repr(value)
    return None


def _module_entries(mod: types.ModuleType, data: bool) -> dict[str, Any]:
    """Callables of a module; for harness modules (data=True) also their classes' members and data."""
    out: dict[str, Any] = {}
    for name, value in list(vars(mod).items()):
        if name.startswith("__"):
            continue
        key = f"{mod.__name__}.{name}"
        if callable(value):
            out[key] = value
            if data and isinstance(value, type) and value.__module__ == mod.__name__:
                out.update(_class_entries(value, key))
        elif data and (rep := _plain_repr(value)) is not None:
            out[key] = ("data", rep)
    return out


def _class_entries(cls: type, prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in dir(cls):
        if name.startswith("__") and name not in ("__call__", "__init__"):
            continue
        try:
            out[f"{prefix}.{name}"] = inspect.getattr_static(cls, name)  # stable objects (no fresh bound methods)
        except AttributeError:
            pass
    return out


def snapshot(harness_modules: list[types.ModuleType], library_modules: list[types.ModuleType],
             classes: list[type]) -> dict[str, Any]:
    entries: dict[str, Any] = {}
    for mod in harness_modules:
        entries.update(_module_entries(mod, data=True))
    for mod in library_modules:
        entries.update(_module_entries(mod, data=False))
    for cls in classes:
        entries.update(_class_entries(cls, f"{cls.__module__}.{cls.__qualname__}"))
    return entries


def capture(harness_modules: list[types.ModuleType], library_modules: list[types.ModuleType],
            classes: list[type]) -> Callable[[], None]:
    """Snapshot now; return ``verify()`` that raises Tampered naming every rebinding since."""
    before = snapshot(harness_modules, library_modules, classes)
    take = snapshot

    def verify() -> None:
        now = take(harness_modules, library_modules, classes)
        changed = []
        for key, old in before.items():
            new = now.get(key, _MISSING)
            same = new == old if isinstance(old, tuple) and old[:1] == ("data",) else new is old
            if not same:
                changed.append(key)
        if changed:
            raise Tampered(changed)

    return verify


_MISSING = object()
