"""The torch language: build() returns a Python callable of torch ops; nothing to compile."""

from __future__ import annotations

import time
import types
from typing import Any

import torch

from kernels.backends.base import Built, CompileError, line_in_source


class TorchBackend:
    name = "torch"

    def version(self) -> str:
        return f"torch {torch.__version__}"

    def build(self, module: types.ModuleType, config: dict[str, Any], shape: dict[str, Any],
              device: torch.device) -> Built:
        t0 = time.perf_counter()
        try:
            fn = module.build(dict(config), dict(shape))
        except Exception as exc:
            raise CompileError(f"{type(exc).__name__} in build(): {exc}",
                               line_in_source(exc, module.__file__ or "")) from exc
        if not callable(fn):
            raise CompileError(f"build() returned {type(fn).__name__}, not a callable")
        return Built(fn=fn, compile_seconds=time.perf_counter() - t0)
