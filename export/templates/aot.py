"""CuTe DSL kernels compiled ahead of time: built from the shared objects in ``aot/`` instead of JIT-compiled.

kerneltune's export compiled each CuTe entry at every M its bucket serves (``cute.compile(..., options="--gpu-arch
sm_90a --enable-tvm-ffi")``, then ``export_to_c`` and a link into ``aot/<name>.so``); dispatch.json's entry says
which M have one (``"aot": {"ms": {"M": {"file", "function", "constexprs", "runtime_args"}}, "chained": {"1": {...},
"2": {...}}}``: "ms" the plain launches, "chained" the builds as links of a chain, for variants that chain). Here
such a file is loaded with ``cutlass.cute.runtime.load_module`` (it needs nvidia-cutlass-dsl's runtime library and
apache-tvm-ffi, not the compiler), so nothing JIT-compiles when vLLM starts or captures its graphs.

Why the build goes through the variant's own ``build()``: the variant's source is what the service checked and
timed, byte for byte (its content hash is its identity), and its build() holds the run-time checks and any buffers
the kernel needs. So build() runs as written, and only its call of ``cute.compile`` is answered by the loaded
function, on one condition: the same @cute.jit function with the same compile-time constants as the exported build.
Anything else (another function, other constants, no call at all) is JIT-compiled as before, and ``how`` says why.

KT_LS_AOT=0 turns all of it off (JIT everywhere).
"""

from __future__ import annotations

import os
import platform
import threading
from importlib import resources
from typing import Any, Callable

AOT_ENV = "KT_LS_AOT"
_lock = threading.Lock()  # cute.compile is swapped for one build at a time


def signature(args: tuple) -> tuple[list[int], int]:
    """(the compile-time constants in order, the number of run-time arguments) of a cute.compile call's arguments:
    the variants pass constants as plain ints and run-time arguments as pointers and a stream."""
    consts = [int(a) for a in args if isinstance(a, int)]
    return consts, len(args) - len(consts)


def _arg(value: Any) -> Any:
    # cute pointers pass as they are (tvm-ffi reads __tvm_ffi_opaque_ptr__); a CUstream by its handle
    if hasattr(value, "__tvm_ffi_opaque_ptr__") or isinstance(value, int):
        return value
    return int(value)


def unusable(spec: dict[str, Any] | None, host: str | None, pdl: int = 0) -> str | None:
    """None when this entry's M (at chain level ``pdl``) has a shared object that can be loaded here, else why not."""
    if os.environ.get(AOT_ENV, "1") == "0":
        return f"{AOT_ENV}=0"
    if not spec:
        return "no ahead-of-time build for this M" + (f" at chain level {pdl}" if pdl else "")
    if host and platform.machine() != host:
        return f"the ahead-of-time builds are for a {host} host, this one is {platform.machine()}"
    return None


def spec_for(built: dict[str, Any], m: int, pdl: int = 0) -> dict[str, Any] | None:
    """The shared object's spec of M at chain level ``pdl`` in a dispatch entry's "aot" section, if it has one."""
    ms = built.get("ms", {}) if not pdl else built.get("chained", {}).get(str(pdl), {})
    return ms.get(str(m))


def build(module: Any, config: dict[str, Any], arg: dict[str, Any],
          spec: dict[str, Any], pdl: int = 0) -> tuple[Callable[..., None], str]:
    """``module.build(config, arg[, pdl])`` with its cute.compile answered by the shared object of ``spec``:
    (the kernel, "aot") or, where the build did not ask for that exact kernel, (the JIT-compiled kernel, "jit: why")."""
    import cutlass.cute as cute
    from cutlass.cute.runtime import load_module  # imports tvm_ffi when called, not here

    kw = {"pdl": pdl} if pdl else {}

    path = resources.files(__package__).joinpath("aot", spec["file"])
    try:
        loaded = load_module(str(path))
        fn = loaded[spec["function"]]
    except Exception as exc:  # a host that cannot map it (no tvm-ffi, a policy against text relocations): JIT
        return module.build(config, arg, **kw), f"jit: {spec['file']} did not load: {type(exc).__name__}: {exc}"
    want = (list(spec["constexprs"]), int(spec["runtime_args"]))
    seen: list[str] = []
    real_compile = cute.compile

    def answer(jit_fn: Any, *args: Any, **options: Any) -> Any:
        got = signature(args)
        if options or getattr(jit_fn, "__name__", None) != spec["jit_function"] or got != want:
            seen.append(f"jit: the build compiled {getattr(jit_fn, '__name__', jit_fn)} {got}, "
                        f"the ahead-of-time one is {spec['jit_function']} {want}")
            return real_compile(jit_fn, *args, **options)
        seen.append("aot")
        # the closure holds the loaded module too: its library stays mapped as long as the kernel lives
        return lambda *call_args, _lib=loaded: fn(*(_arg(a) for a in call_args))

    with _lock:
        cute.compile = answer
        try:
            kernel = module.build(config, arg, **kw)
        finally:
            cute.compile = real_compile
    if not seen:
        return kernel, "jit: the build did not call cute.compile"
    return kernel, seen[0] if len(seen) == 1 else f"jit: the build compiled {len(seen)} kernels"
