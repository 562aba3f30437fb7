"""Language backends: how a variant's source becomes a callable for one (config, shape, device).

A variant module (any language) defines::

    CONFIG_SPACE = {...}                       # optional default space
    USES_LIBRARY = False                       # optional: True declares calls into cuBLAS/oneDNN
    CLAIMS = {"ptx_contains": ["wgmma"]}       # optional: what the compiled PTX must show
    def build(config: dict, shape: dict) -> Callable[..., None]
    def compile_ptx(config: dict, shape: dict, arch: str) -> str   # triton/cute: ahead-of-time PTX, no GPU

``shape`` is ``Shape.as_build_arg(M)``. The callable follows the slot's calling convention
(kernels/slots/base.py). Backends run inside the sandboxed child process only.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import torch


class CompileError(Exception):
    """The variant did not build: message is the trimmed compiler output."""

    def __init__(self, message: str, line: int | None = None, log: str = ""):
        super().__init__(message)
        self.line = line
        self.log = log


class NeedsDevice(Exception):
    """The language cannot run on this device (e.g. CuTe DSL without a GPU): compile-only."""


@dataclass
class Built:
    fn: Callable[..., None]
    ptx: str | None = None
    compile_seconds: float = 0.0
    cache_hit: bool = False
    log: str = ""
    notes: list[str] = field(default_factory=list)


class LanguageBackend(Protocol):
    name: str

    def version(self) -> str: ...

    def build(self, module: types.ModuleType, config: dict[str, Any], shape: dict[str, Any],
              device: torch.device) -> Built: ...


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def load_module(source: str, name: str, filename: str) -> types.ModuleType:
    """Execute variant source as a module whose tracebacks point at ``filename`` lines.

    The source is written to ``filename`` first (inside the sandbox's private directory) because
    Triton and CuTe DSL read a kernel's source text back through ``inspect``.
    """
    with open(filename, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(name, filename)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise CompileError(f"SyntaxError: {exc.msg}", exc.lineno) from exc
    except Exception as exc:  # import-time failure of untrusted code
        raise CompileError(f"{type(exc).__name__} while importing the variant: {exc}",
                           line_in_source(exc, filename)) from exc
    if not callable(getattr(module, "build", None)):
        raise CompileError("the variant module defines no build(config, shape) function")
    return module


def line_in_source(exc: BaseException, filename: str) -> int | None:
    """The deepest traceback line that lies in the submitted source, if any."""
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line
