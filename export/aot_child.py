"""Child process of export/aot.py: compile CuTe DSL builds ahead of time and link each into a shared object.

Runs variant code (compile_target executes the variant's Python), so it runs here, in a process of its own with
limits, never in the API process. Reads one JSON request on stdin::

    {"arch": "sm_90a", "out_dir": "...", "items": [{"name", "module", "source_path", "config", "shape", "pdl"}]}

and writes one JSON line per item on stdout: {"name", "ok": true, "jit_function", "constexprs", "runtime_args"} or
{"name", "ok": false, "error"}. Each item: the variant's ``compile_target(config, shape[, pdl])`` gives the @cute.jit
function and its compile arguments; ``cute.compile(..., options="--gpu-arch <arch> --enable-tvm-ffi")`` compiles it
without a GPU; ``export_to_c`` writes the object (cubin inside, only the tvm-ffi entry exported) and ``cc -shared``
links it against nvidia-cutlass-dsl's runtime library and libtvm_ffi, which the package finds at run time.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from export.templates.aot import signature

LINK_TIMEOUT_S = 60


def runtime_library_dirs() -> list[str]:
    """Where the linker finds libcuda_dialect_runtime.so (nvidia-cutlass-dsl) and libtvm_ffi.so (apache-tvm-ffi)."""
    import tvm_ffi.libinfo
    from cutlass.cute.runtime import find_runtime_libraries

    return sorted({str(Path(p).parent) for p in find_runtime_libraries(enable_tvm_ffi=False)}
                  | {str(Path(tvm_ffi.libinfo.find_libtvm_ffi()).parent)})


def _load(item: dict[str, Any], cache: dict[str, ModuleType]) -> ModuleType:
    name = item["module"]
    if name not in cache:
        spec = importlib.util.spec_from_file_location(f"kt_aot_{name}", item["source_path"])
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        cache[name] = module
    return cache[name]


def build_one(item: dict[str, Any], arch: str, out_dir: Path, lib_dirs: list[str],
              modules: dict[str, ModuleType]) -> dict[str, Any]:
    import cutlass.cute as cute

    module = _load(item, modules)
    target = getattr(module, "compile_target", None)
    if target is None:
        raise RuntimeError(f"{item['module']} declares no compile_target(config, shape): nothing to compile ahead of time")
    kw = {"pdl": item["pdl"]} if item["pdl"] else {}
    if kw and "pdl" not in inspect.signature(target).parameters:
        raise RuntimeError(f"{item['module']}.compile_target takes no pdl")
    jit_fn, args = target(dict(item["config"]), dict(item["shape"]), **kw)
    compiled = cute.compile(jit_fn, *args, options=f"--gpu-arch {arch} --enable-tvm-ffi")
    obj, lib = out_dir / f"{item['name']}.o", out_dir / f"{item['name']}.so"
    compiled.export_to_c(str(obj), function_name=item["name"], export_only_tvm_ffi_symbols=True)
    cmd = ["cc", "-shared", "-o", str(lib), str(obj)]
    for d in lib_dirs:
        cmd += ["-L", d]
    cmd += ["-lcuda_dialect_runtime", "-ltvm_ffi"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=LINK_TIMEOUT_S)
    obj.unlink(missing_ok=True)
    if proc.returncode != 0:
        raise RuntimeError(f"link failed (exit {proc.returncode}): {(proc.stdout + proc.stderr)[-2000:]}")
    consts, runtime_args = signature(args)
    return {"jit_function": jit_fn.__name__, "constexprs": consts, "runtime_args": runtime_args}


def main() -> int:
    request = json.loads(sys.stdin.read())
    out_dir = Path(request["out_dir"])
    try:
        lib_dirs = runtime_library_dirs()
    except Exception as exc:  # the toolchain itself is missing: every item says so
        lib_dirs, missing = [], f"{type(exc).__name__}: {exc}"
    else:
        missing = None
    modules: dict[str, ModuleType] = {}
    for item in request["items"]:
        line: dict[str, Any] = {"name": item["name"]}
        try:
            if missing:
                raise RuntimeError(f"no CuTe DSL / tvm-ffi toolchain here: {missing}")
            line.update(ok=True, **build_one(item, request["arch"], out_dir, lib_dirs, modules))
        except Exception as exc:
            text = str(exc).replace("\x1b[92m", "").replace("\x1b[0m", "")
            line.update(ok=False, error=f"{type(exc).__name__}: {text}"[:2000],
                        trace=traceback.format_exc()[-3000:])
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main())
