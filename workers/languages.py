"""Language name -> backend instance. Triton and CuTe DSL backends are imported only when asked
for, so a machine without them (or a backend not written yet) gives a clear compile_failed."""

from __future__ import annotations

import importlib

from kernels.backends.base import CompileError, LanguageBackend

_MODULES = {
    "torch": "kernels.backends.torch_backend",
    "triton": "kernels.backends.triton_backend",
    "cute": "kernels.backends.cute_backend",
}


class BackendUnavailable(CompileError):
    pass


def get_backend(language: str) -> LanguageBackend:
    module_name = _MODULES.get(language)
    if module_name is None:
        raise BackendUnavailable(f"unknown language {language!r}; known: {', '.join(sorted(_MODULES))}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendUnavailable(f"the {language} backend is not available on this worker: "
                                 f"{type(exc).__name__}: {exc}") from exc
    # The backend module exposes one class whose ``name`` is the language (TorchBackend, ...).
    for value in vars(module).values():
        if isinstance(value, type) and getattr(value, "name", None) == language and callable(getattr(value, "build", None)):
            return value()
    raise BackendUnavailable(f"{module_name} defines no backend class named {language!r}")
