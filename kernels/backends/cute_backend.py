"""The cute language (NVIDIA CuTe DSL, nvidia-cutlass-dsl 4.3.5).

CPU: compile for sm_90a ahead of time, check the claims in the PTX, then raise NeedsDevice with
the PTX attached: check and bench wait for a GPU queue. CUDA: module.build(config, shape) compiles
with cute.compile for the device and returns a callable taking torch tensors.

A variant gives its AOT PTX one of two ways:
- ``compile_target(config, shape) -> (jit_fn, args)``: the @cute.jit function and the arguments to
  compile it with (fake tensors, cute.runtime.make_ptr pointers, make_fake_stream(), constexprs);
  the backend compiles it with compile_cute_ptx() below, which knows 4.3.5's no-driver behaviour;
- ``compile_ptx(config, shape, arch) -> str``: the variant does it all itself.

4.3.5 with no driver: cute.compile writes the PTX (and cubin), then fails loading libcuda:
CudaDriverDependencyError caused by cuda.pathfinder's DynamicLibNotFoundError("cuda"). That error,
recognised by its cause chain, is the only one expected; everything else is a CompileError.

Caching: records (PTX + metadata) in compile_cache; CuTe DSL's own file cache of compiled modules
(CUTE_DSL_CACHE_DIR, cubin inside) is pointed into the cache root. 4.3.5 reads that variable when
``cutlass`` is first imported, so the sandbox child calls compile_cache.configure_language_caches()
before importing cutlass (build() does it too when cutlass is not imported yet). Its key is the
IR hash, so a restarted worker still traces the Python (tens of ms) but skips NVVM/ptxas.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import types
from typing import Any, Callable

import torch

from kernels.backends import compile_cache
from kernels.backends.base import Built, CompileError, NeedsDevice, line_in_source, source_hash

AOT_ARCH = "sm_90a"
PTX_LIMIT = 200_000
MESSAGE_LIMIT = 2_000


class CuteNeedsDevice(NeedsDevice):
    """Compiled for the GPU arch on a machine without one: carries the evidence of the compile."""

    def __init__(self, message: str, ptx: str | None, compile_seconds: float, cache_hit: bool):
        super().__init__(message)
        self.ptx = ptx
        self.compile_seconds = compile_seconds
        self.cache_hit = cache_hit


def is_missing_driver(exc: BaseException) -> bool:
    """True for 4.3.5's "no CUDA driver" failure at JIT load (DynamicLibNotFoundError in the chain)."""
    seen: BaseException | None = exc
    while seen is not None:
        if type(seen).__name__ == "DynamicLibNotFoundError":
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def compile_cute_ptx(jit_fn: Callable, args: tuple, arch: str = AOT_ARCH) -> str:
    """cute.compile ``jit_fn(*args)`` for ``arch`` with PTX kept in a private dump dir; return the PTX.

    Works with or without a GPU: without a driver the expected DynamicLibNotFoundError is named and
    dropped, and the PTX is read from the dump dir; any other exception propagates unchanged.
    """
    import cutlass.cute as cute

    dump = tempfile.mkdtemp(prefix="kt_cute_ptx_")
    try:
        try:
            compiled = cute.compile(jit_fn, *args, options=f"--gpu-arch {arch} --keep-ptx --dump-dir {dump}")
            ptx = getattr(compiled, "__ptx__", None)
            if ptx:
                return ptx.rstrip("\x00")
        except Exception as exc:
            if not is_missing_driver(exc):
                raise
        for name in sorted(os.listdir(dump)):
            if name.endswith(".ptx"):
                with open(os.path.join(dump, name)) as f:
                    return f.read().rstrip("\x00")  # the dump ends in a C string's NUL
        raise CompileError(f"CuTe DSL wrote no PTX for {arch}")
    finally:
        shutil.rmtree(dump, ignore_errors=True)


def _trim(text: str, limit: int = MESSAGE_LIMIT) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit // 2] + "\n...\n" + text[-limit // 2:]


def _compile_error(exc: BaseException, module: types.ModuleType, stage: str) -> CompileError:
    # CuTe DSL wraps errors in DSLRuntimeError with coloured suggestions; keep the text, drop colour codes.
    text = str(exc).replace("\x1b[92m", "").replace("\x1b[0m", "")
    return CompileError(_trim(f"{type(exc).__name__} in {stage}: {text}"), line_in_source(exc, module.__file__ or ""),
                        log=_trim(text, 20_000))


def claims_for(module: types.ModuleType, config: dict[str, Any], shape: dict[str, Any]) -> list[str]:
    fn = getattr(module, "claims", None)
    claims = fn(dict(config), dict(shape)) if callable(fn) else getattr(module, "CLAIMS", None) or {}
    return list(claims.get("ptx_contains", []))


def verify_claims(ptx: str, claimed: list[str]) -> None:
    for instr in claimed:
        if instr not in ptx:
            raise CompileError(f"PTX lacks claimed instruction {instr}")


def cutlass_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nvidia-cutlass-dsl")
    except PackageNotFoundError:  # installed with pip --target: no dist-info on the path
        import cutlass

        return getattr(cutlass, "__version__", "unknown")


class CuteBackend:
    name = "cute"

    def version(self) -> str:
        return f"nvidia-cutlass-dsl {cutlass_version()}"

    def build(self, module: types.ModuleType, config: dict[str, Any], shape: dict[str, Any],
              device: torch.device) -> Built:
        if "cutlass" not in sys.modules:
            compile_cache.configure_language_caches()
        t0 = time.perf_counter()
        src_text = open(module.__file__).read() if module.__file__ else ""
        arch = _device_arch(device)
        key = compile_cache.make_key(source_hash(src_text), config, shape, self.name, self.version(), arch)
        hit = compile_cache.lookup(key)
        ptx = hit.ptx if hit is not None else None
        if device.type == "cuda":
            try:
                fn = module.build(dict(config), dict(shape))
            except Exception as exc:
                raise _compile_error(exc, module, "build()") from exc
            if not callable(fn):
                raise CompileError(f"build() returned {type(fn).__name__}, not a callable")
            if ptx is None:  # evidence and the claims check: one more compile, cached by key
                ptx = self.aot_ptx(module, config, shape, arch)
        else:
            fn = None
            if ptx is None:
                ptx = self.aot_ptx(module, config, shape, AOT_ARCH)
        if ptx is not None:
            verify_claims(ptx, claims_for(module, config, shape))
        seconds = time.perf_counter() - t0
        if hit is None:
            compile_cache.store(key, {"language": self.name, "version": self.version(), "arch": arch,
                                      "config": config, "shape": shape, "compile_seconds": seconds}, ptx)
        if fn is None:
            raise CuteNeedsDevice(f"compiled for {AOT_ARCH}; check and bench wait for a GPU queue",
                                  _trim_ptx(ptx), seconds, hit is not None)
        return Built(fn=fn, ptx=_trim_ptx(ptx), compile_seconds=seconds, cache_hit=hit is not None)

    def aot_ptx(self, module: types.ModuleType, config: dict[str, Any], shape: dict[str, Any],
                arch: str) -> str | None:
        target = getattr(module, "compile_target", None)
        own = getattr(module, "compile_ptx", None)
        try:
            if callable(target):
                jit_fn, args = target(dict(config), dict(shape))
                ptx = compile_cute_ptx(jit_fn, tuple(args), arch)
            elif callable(own):
                ptx = own(dict(config), dict(shape), arch)
            else:
                return None
        except CompileError:
            raise
        except Exception as exc:
            raise _compile_error(exc, module, f"compile for {arch}") from exc
        if not isinstance(ptx, str) or ".target" not in ptx:
            raise CompileError(f"the AOT compile returned {type(ptx).__name__}, not PTX text")
        return ptx


def _device_arch(device: torch.device) -> str:
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"sm_{major}{minor}{'a' if major >= 9 else ''}"
    return AOT_ARCH


def _trim_ptx(ptx: str | None) -> str | None:
    if ptx is None or len(ptx) <= PTX_LIMIT:
        return ptx
    return ptx[:PTX_LIMIT] + f"\n// ... {len(ptx) - PTX_LIMIT} more characters trimmed\n"
