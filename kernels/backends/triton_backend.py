"""The triton language: compile eagerly on a GPU; on the CPU compile for sm_90a ahead of time, check
the claims in the PTX, then run the kernel under Triton's interpreter.

HARNESS REQUIREMENT (CPU device): the sandbox child sets ``TRITON_INTERPRET=1`` in ``os.environ``
before it imports triton or loads any variant module. ``@triton.jit`` decides at decoration time
(module import) whether a kernel is an interpreted one, so the variant must be imported with the
variable already set. If it was not, build() re-imports the variant's file in interpreter mode
itself (and says so in Built.notes), but that executes the submitted module a second time.
Call ``compile_cache.configure_language_caches()`` before ``import triton`` too, so Triton's binary
cache (TRITON_CACHE_DIR) lives inside the persistent compile cache.

The AOT step needs compiled-mode kernels: once triton is imported with TRITON_INTERPRET=1 its own
library functions are interpreted too and ASTSource cannot compile them, so on the CPU the AOT
compile runs in a fresh child interpreter without the variable (about 3 s, once per cache key).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import types
import uuid
from typing import Any, Callable, Iterator

import torch

from kernels.backends import compile_cache
from kernels.backends.base import Built, CompileError, line_in_source, source_hash

AOT_ARCH = "sm_90a"
PTX_LIMIT = 200_000  # characters of PTX kept in Built.ptx as evidence
MESSAGE_LIMIT = 2_000
AOT_TIMEOUT_S = 300
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _trim(text: str, limit: int = MESSAGE_LIMIT) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit // 2] + "\n...\n" + text[-limit // 2:]


def compile_triton_ptx(jit_fn: Any, signature: dict[str, str], constexprs: dict[str, Any], arch: int = 90,
                       num_warps: int = 4, num_stages: int = 3, attrs: dict | None = None) -> str:
    """AOT-compile one Triton kernel for ``sm_<arch>`` (``a`` features on 90) with no GPU; return PTX.

    ``signature`` maps every non-constexpr parameter to a Triton type ("*bf16", "i32", ...);
    constexpr parameters go in ``constexprs`` (the helper marks them in the signature).
    """
    from triton import compile as triton_compile
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = dict(signature)
    sig.update({name: "constexpr" for name in constexprs})
    src = ASTSource(fn=jit_fn, signature=sig, constexprs=dict(constexprs), attrs=attrs)
    kernel = triton_compile(src, target=GPUTarget("cuda", arch, 32),
                            options={"num_warps": num_warps, "num_stages": num_stages})
    return kernel.asm["ptx"]


def claims_for(module: types.ModuleType, config: dict[str, Any], shape: dict[str, Any]) -> list[str]:
    """CLAIMS may be a dict, or a function claims(config, shape) -> dict when they depend on the config."""
    fn = getattr(module, "claims", None)
    claims = fn(dict(config), dict(shape)) if callable(fn) else getattr(module, "CLAIMS", None) or {}
    return list(claims.get("ptx_contains", []))


def verify_claims(ptx: str, claimed: list[str]) -> None:
    for instr in claimed:
        if instr not in ptx:
            raise CompileError(f"PTX lacks claimed instruction {instr}")


def compile_error(exc: BaseException, module: types.ModuleType, stage: str) -> CompileError:
    """A CompileError naming the line of the submitted file where Triton (or Python) failed."""
    filename = module.__file__ or ""
    line = _triton_error_line(exc, module) or line_in_source(exc, filename)
    return CompileError(_trim(f"{type(exc).__name__} in {stage}: {exc}"), line, log=_trim(str(exc), 20_000))


def _triton_error_line(exc: BaseException, module: types.ModuleType) -> int | None:
    """Triton reports lines relative to the kernel's ``def``; map them back to the file."""
    from triton.compiler.errors import CompilationError

    seen: BaseException | None = exc
    while seen is not None and not isinstance(seen, CompilationError):
        seen = seen.__cause__ or seen.__context__
    if seen is None or not hasattr(seen.node, "lineno"):
        return None
    for obj in vars(module).values():
        src = getattr(obj, "_src", None)
        raw = getattr(obj, "raw_src", None)
        if src is not None and src == seen.src and raw is not None:
            def_offset = next(i for i, ln in enumerate(raw) if ln.lstrip().startswith("def "))
            return obj.starting_line_number + def_offset + seen.node.lineno - 1
    return None


@contextlib.contextmanager
def _interpret_env(on: bool) -> Iterator[None]:
    old = os.environ.get("TRITON_INTERPRET")
    if on:
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old


def _twin(module: types.ModuleType, interpret: bool) -> types.ModuleType:
    """Import the variant's file again with TRITON_INTERPRET set as asked (private module name)."""
    filename = module.__file__
    if not filename:
        raise CompileError("the variant module has no file to re-import for the AOT compile")
    spec = importlib.util.spec_from_file_location(f"{module.__name__}__twin_{uuid.uuid4().hex[:8]}", filename)
    assert spec and spec.loader
    twin = importlib.util.module_from_spec(spec)
    with _interpret_env(interpret):
        try:
            spec.loader.exec_module(twin)
        except Exception as exc:
            raise compile_error(exc, module, "import") from exc
    return twin


def _is_interpreted(module: types.ModuleType) -> bool | None:
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    kinds = {isinstance(v, InterpretedFunction) for v in vars(module).values()
             if isinstance(v, (InterpretedFunction, JITFunction))}
    return None if not kinds else kinds == {True}


class TritonBackend:
    name = "triton"

    def version(self) -> str:
        import triton

        return f"triton {triton.__version__}"

    def build(self, module: types.ModuleType, config: dict[str, Any], shape: dict[str, Any],
              device: torch.device) -> Built:
        t0 = time.perf_counter()
        src_text = open(module.__file__).read() if module.__file__ else ""
        arch = _device_arch(device)
        key = compile_cache.make_key(source_hash(src_text), config, shape, self.name, self.version(), arch)
        hit = compile_cache.lookup(key)
        notes: list[str] = []
        claimed = claims_for(module, config, shape)  # from the submitted module, before any re-import
        if device.type == "cuda":
            fn = self._call_build(module, config, shape)
            _compile_now(fn, module, shape, device)  # compile errors land in the compile stage
            if hit is not None and hit.ptx is not None:
                ptx = hit.ptx
            else:  # the PTX the claims are checked on: same kernel, this device's arch
                ptx = self._aot_ptx(module, config, shape, arch) or _latest_ptx(module)
        else:
            if hit is not None and hit.ptx is not None:
                ptx = hit.ptx  # compiled before for exactly this key: skip the AOT compile
            else:
                ptx = self._aot_ptx(module, config, shape, AOT_ARCH)
            if _is_interpreted(module) is False:
                notes.append("variant was imported without TRITON_INTERPRET=1; re-imported in interpreter mode")
                module = _twin(module, interpret=True)
            fn = self._call_build(module, config, shape)
        if ptx is not None:
            verify_claims(ptx, claimed)
        seconds = time.perf_counter() - t0
        if hit is None:
            compile_cache.store(key, {"language": self.name, "version": self.version(), "arch": arch,
                                      "config": config, "shape": shape, "compile_seconds": seconds}, ptx)
        return Built(fn=fn, ptx=_trim_ptx(ptx), compile_seconds=seconds, cache_hit=hit is not None,
                     notes=notes)

    def _call_build(self, module: types.ModuleType, config: dict[str, Any], shape: dict[str, Any]) -> Callable:
        try:
            fn = module.build(dict(config), dict(shape))
        except Exception as exc:
            raise compile_error(exc, module, "build()") from exc
        if not callable(fn):
            raise CompileError(f"build() returned {type(fn).__name__}, not a callable")
        return fn

    def _aot_ptx(self, module: types.ModuleType, config: dict[str, Any], shape: dict[str, Any],
                 arch: str) -> str | None:
        if not callable(getattr(module, "compile_ptx", None)):
            return None  # nothing to compile ahead of time: the interpreter run is the only check
        if _is_interpreted(module) is False:
            with _interpret_env(False):
                try:
                    ptx = module.compile_ptx(dict(config), dict(shape), arch)
                except Exception as exc:
                    raise compile_error(exc, module, f"compile_ptx(arch={arch})") from exc
        else:
            ptx = _aot_in_subprocess(module, config, shape, arch)
        if not isinstance(ptx, str) or ".target" not in ptx:
            raise CompileError(f"compile_ptx returned {type(ptx).__name__}, not PTX text")
        return ptx


def _aot_in_subprocess(module: types.ModuleType, config: dict[str, Any], shape: dict[str, Any], arch: str) -> str:
    """Run compile_ptx in a fresh interpreter without TRITON_INTERPRET: once triton is imported in
    interpreter mode its own library kernels are interpreted too, and ASTSource cannot compile them."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_REPO_ROOT, env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="kt_aot_") as tmp:
        result = os.path.join(tmp, "result.json")
        args = [sys.executable, "-m", "kernels.backends.triton_backend", "aot", module.__file__ or "",
                json.dumps(config), json.dumps(shape), arch, result]
        proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=AOT_TIMEOUT_S)
        if not os.path.exists(result):
            raise CompileError(_trim(f"AOT compile process failed (exit {proc.returncode})"),
                               log=_trim(proc.stdout + proc.stderr, 20_000))
        with open(result) as f:
            data = json.load(f)
    if "error" in data:
        raise CompileError(data["error"], data.get("line"), log=data.get("log", ""))
    return data["ptx"]


def _aot_main(filename: str, config_json: str, shape_json: str, arch: str, result: str) -> None:
    """Child side of _aot_in_subprocess: compile_ptx of the variant file, result as JSON in a file
    (not stdout, which the variant's own code may write to)."""
    module = None
    try:
        spec = importlib.util.spec_from_file_location(f"kt_aot_variant_{uuid.uuid4().hex[:8]}", filename)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        ptx = module.compile_ptx(json.loads(config_json), json.loads(shape_json), arch)
        data: dict[str, Any] = {"ptx": ptx}
    except Exception as exc:  # reported to the parent as a CompileError
        if module is None:
            err = CompileError(_trim(f"{type(exc).__name__} while importing the variant: {exc}"),
                               line_in_source(exc, filename))
        else:
            err = compile_error(exc, module, f"compile_ptx(arch={arch})")
        data = {"error": str(err), "line": err.line, "log": err.log}
    with open(result, "w") as f:
        json.dump(data, f)


def _device_arch(device: torch.device) -> str:
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"sm_{major}{minor}{'a' if major >= 9 else ''}"
    return f"{AOT_ARCH}+interpreter"


def _compile_now(fn: Callable, module: types.ModuleType, shape: dict[str, Any], device: torch.device) -> None:
    """Call the built fn once on scratch inputs of the slot's shape: Triton compiles on first launch,
    so compile errors and compile time surface here instead of in the check stage."""
    try:
        from kernels.catalogue import get_slot
        from kernels.slots.base import Shape
    except ImportError:  # a bare GPU box without the service's deps: the check stage compiles instead
        return

    slot = get_slot(shape["slot"])
    dims = {k: v for k, v in shape.items() if k not in ("M", "slot", "name", "dtype")}
    s = Shape(shape["slot"], shape["name"], dims, shape.get("dtype", "bfloat16"))
    m = int(shape["M"])
    args = {**slot.make_inputs(s, m, seed=0, device=device), **slot.alloc_outputs(s, m, device)}
    try:
        with torch.cuda.device(device):
            fn(**args)
            torch.cuda.synchronize(device)
    except Exception as exc:
        raise compile_error(exc, module, "first launch") from exc


def _latest_ptx(module: types.ModuleType) -> str | None:
    """PTX of the most recently compiled specialisation of the module's kernels (evidence only)."""
    from triton.runtime.jit import JITFunction

    for obj in vars(module).values():
        if isinstance(obj, JITFunction):
            for per_device in getattr(obj, "device_caches", {}).values():
                cache = per_device[0] if isinstance(per_device, tuple) else per_device
                for kernel in reversed(list(cache.values())):
                    ptx = getattr(kernel, "asm", {}).get("ptx")
                    if ptx:
                        return ptx
    return None


def _trim_ptx(ptx: str | None) -> str | None:
    if ptx is None or len(ptx) <= PTX_LIMIT:
        return ptx
    return ptx[:PTX_LIMIT] + f"\n// ... {len(ptx) - PTX_LIMIT} more characters trimmed\n"


if __name__ == "__main__" and len(sys.argv) == 7 and sys.argv[1] == "aot":
    _aot_main(*sys.argv[2:])
