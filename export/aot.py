"""Ahead-of-time builds of an export's CuTe DSL entries, so nothing JIT-compiles when vLLM starts.

DESIGN.md (Export): "compiled kernels for the target arch where the language allows it (CuTe DSL compiles ahead of
time ...) so nothing JIT-compiles when vLLM starts". A CuTe entry's kernel has its shapes as compile-time constants,
so the package builds one kernel per batch size: without this, vLLM's start (and each CUDA-graph capture size) pays
one cute.compile per (entry, M). Here every (entry, M the entry's bucket serves) is compiled for the hardware's arch
on this machine, no GPU needed, and linked into ``aot/<name>.so`` (export/aot_child.py, in a limited child process:
compile_target runs the variant's code). The package loads them (templates/aot.py) and JIT-compiles whatever has
none.

A variant that can be a link of a chain of programmatic dependent launches (its ``compile_target`` takes ``pdl``;
the package builds it so when vLLM runs with KT_LS_PDL=1 or 2) is also compiled at chain levels 1 and 2, so the
chained path JIT-compiles nothing either. Whether it can is read from its source (``chains``), not by running it.

What a build needs here: nvidia-cutlass-dsl and apache-tvm-ffi importable, and ``cc`` to link. Missing any, the
export goes on without AOT builds and says why (``AotReport.skipped``). A build that fails is listed the same way
and its M is JIT-compiled on the target; it is not a problem of the evidence.

CuTe DSL 4.3.5's objects carry absolute relocations in their code, so each .so has text relocations (DT_TEXTREL):
glibc loads them, a host whose SELinux policy forbids text relocation (execmod) does not, and the package then
JIT-compiles as before.

Built objects are cached under the compile cache (``<KT_COMPILE_CACHE>/aot``), keyed by everything that can change
the bytes (variant hash, config, shape, M, chain level, arch, toolchain versions, symbol name): re-exporting the same
winners links nothing again. The bytes do not depend on paths or time (the same build in two folders gives the same
.so), so the wheel stays reproducible.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from export.collect import Entry
from export.errors import Problem
from kernels.backends.compile_cache import cache_root, canonical
from kernels.deployment import bucket_ms, spans
from workers.sandbox import allowed_environment, limited_preexec

REPO_ROOT = Path(__file__).resolve().parents[1]
FORMAT = 1
LANGUAGE = "cute"
TOOLCHAIN = ("nvidia-cutlass-dsl", "apache-tvm-ffi")
ITEM_TIMEOUT_S = 120.0  # one compile + link; the 4.3.5 compiles of the dense GEMVs take 0.5-1.5 s here
BASE_TIMEOUT_S = 60.0  # the child's imports (torch, cutlass)
MEMORY_LIMIT = 8 << 30
# compile children at once (each takes one core; a ring GEMV compiles in ~5 s); KT_AOT_JOBS overrides
JOBS_ENV, MAX_JOBS = "KT_AOT_JOBS", 8
CHAIN_LEVELS = (1, 2)  # dispatch's pdl: 1 chained, 2 chained with the weights asked into L2 first


class AotReport(BaseModel):
    """What the export compiled ahead of time: the manifest's ``aot`` section."""

    format: int = FORMAT
    arch: str | None = None
    host: str = platform.machine()
    toolchain: dict[str, str] = {}
    builds: int = 0
    chained: int = 0  # of ``builds``, those of chain levels 1 and 2
    # (slot, shape, bucket) and the M left to JIT on the target, with why; or one row for all when none was tried
    skipped: list[Problem] = []


@dataclass(frozen=True)
class AotItem:
    entry: Entry
    m: int
    pdl: int = 0

    @property
    def shape(self) -> dict[str, Any]:
        """What the package's dispatch passes the variant's build() (dispatch.build_arg)."""
        s = self.entry.shape
        return {**s["dims"], "M": self.m, "slot": s["slot"], "name": s["name"], "dtype": s["dtype"]}

    @property
    def name(self) -> str:
        """The exported symbol and file name: unique per (variant, slot, shape, config, M, chain level)."""
        e = self.entry
        tag = hashlib.sha256(canonical([e.slot, e.shape_key, e.config]).encode()).hexdigest()[:10]
        return f"kt_{e.module}_{tag}_m{self.m}_p{self.pdl}"


def arch_for(archs: list[str]) -> str | None:
    """The CuTe DSL target of the evidence's device arch ("sm_90" -> "sm_90a": the arch-specific features the
    kernels may use, wgmma, TMA, setmaxnreg, exist only there); None when the evidence holds none or several."""
    if len(archs) != 1 or not archs[0].startswith("sm_"):
        return None
    arch = archs[0]
    return arch if arch.endswith("a") or int(arch[3:]) < 90 else arch + "a"


def toolchain() -> dict[str, str] | str:
    """Versions of what builds here, or why nothing can."""
    versions = {}
    for dist in TOOLCHAIN:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            return f"{dist} is not installed where the export runs"
    if shutil.which("cc") is None:
        return "no C linker (cc) where the export runs"
    return versions


def chains(source: str) -> bool:
    """Whether a variant's kernel can be compiled as a link of a chain: its module-level compile_target takes pdl.
    Read from the syntax tree: the export process never runs variant code."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return any(isinstance(node, ast.FunctionDef) and node.name == "compile_target"
               and any(a.arg == "pdl" for a in node.args.args + node.args.kwonlyargs) for node in tree.body)


def plan(entries: list[Entry]) -> list[AotItem]:
    """Every M each CuTe entry's bucket serves with its kernel (dispatch runs it at each of them, except at the M its
    runs measured slower than stock, which get stock), as a plain launch and, where the variant chains, at each
    chain level."""
    items = []
    for e in entries:
        if e.language != LANGUAGE:
            continue
        levels = (0, *CHAIN_LEVELS) if chains(e.source) else (0,)
        slower = set(e.slower_ms)
        items += [AotItem(e, m, pdl) for pdl in levels for m in bucket_ms(e.bucket) if m not in slower]
    return items


def _key(item: AotItem, arch: str, tools: dict[str, str]) -> str:
    payload = canonical({"format": FORMAT, "variant": item.entry.variant_hash, "config": item.entry.config,
                         "shape": item.shape, "pdl": item.pdl, "arch": arch, "tools": tools, "name": item.name,
                         "host": platform.machine()})
    return hashlib.sha256(payload.encode()).hexdigest()


def _child_env(tmp: Path, arch: str) -> dict[str, str]:
    env = allowed_environment()
    pythonpath = [str(REPO_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update({"PYTHONPATH": os.pathsep.join(pythonpath), "HOME": str(tmp), "TMPDIR": str(tmp),
                "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "CUTE_DSL_CACHE_DIR": str(tmp / "cute"),
                # 4.3.5 builds a JIT engine (which needs a driver) when --gpu-arch equals this variable; another
                # value makes cute.compile a cross-compile, with or without a GPU here
                "CUTE_DSL_ARCH": "sm_80" if arch != "sm_80" else "sm_90"})
    env.setdefault("PATH", os.defpath)
    (tmp / "cute").mkdir(exist_ok=True)
    return env


def _run_child(items: list[AotItem], arch: str, out_dir: Path) -> dict[str, dict[str, Any]]:
    """Compile ``items`` in limited children, each item's result line by name. A child that dies (or runs past its
    time) fails the entry it was compiling, at every M and chain level, with its exit status; the other entries'
    items it had not reached go to a new child."""
    lines: dict[str, dict[str, Any]] = {}
    todo = list(items)
    while todo:
        got, why = _one_child(todo, arch, out_dir)
        lines.update(got)
        rest = [it for it in todo if it.name not in got]
        if not rest:
            break
        dead = _where(rest[0])  # the child works through its items in order: it died on the first without a line
        lines.update({it.name: {"ok": False, "error": why} for it in rest if _where(it) == dead})
        todo = [it for it in rest if _where(it) != dead]
    return lines


def _where(item: AotItem) -> tuple[str, str, str]:
    return item.entry.slot, item.entry.shape_key, item.entry.bucket


def _one_child(items: list[AotItem], arch: str, out_dir: Path) -> tuple[dict[str, dict[str, Any]], str]:
    """One limited child for ``items``: (the result lines it wrote, by name; why it stopped if it left any out)."""
    with tempfile.TemporaryDirectory(prefix="kt-aot-") as tmp_s:
        tmp = Path(tmp_s)
        src = tmp / "src"
        src.mkdir()
        request_items = []
        for it in items:
            path = src / f"{it.entry.module}.py"
            if not path.exists():
                path.write_text(it.entry.source)
            request_items.append({"name": it.name, "module": it.entry.module, "source_path": str(path),
                                  "config": it.entry.config, "shape": it.shape, "pdl": it.pdl})
        timeout = BASE_TIMEOUT_S + ITEM_TIMEOUT_S * len(items)
        limits = {resource.RLIMIT_CORE: 0, resource.RLIMIT_NOFILE: 1024, resource.RLIMIT_FSIZE: 512 << 20,
                  resource.RLIMIT_CPU: int(timeout) + 30, resource.RLIMIT_AS: MEMORY_LIMIT}
        request = json.dumps({"arch": arch, "out_dir": str(out_dir), "items": request_items})
        try:
            proc = subprocess.run([sys.executable, "-m", "export.aot_child"], input=request, capture_output=True,
                                  text=True, cwd=tmp, env=_child_env(tmp, arch), timeout=timeout,
                                  start_new_session=True, preexec_fn=limited_preexec(limits))
            stdout, stderr = proc.stdout, proc.stderr
            why = f"the compile child exited with status {proc.returncode}"
        except subprocess.TimeoutExpired as exc:
            stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            why = f"the compile child ran past {timeout:.0f} s"
        lines = {}
        for raw in stdout.splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                continue  # the compiler's own prints
            if isinstance(line, dict) and "name" in line:
                lines[line["name"]] = line
        return lines, f"{why}: {stderr[-1500:]}".strip()


def build(entries: list[Entry], archs: list[str], package_dir: Path) -> tuple[AotReport, dict[tuple[str, str, str],
                                                                                         dict[str, Any]]]:
    """Compile the CuTe entries' kernels into ``package_dir/aot``: (the report, per (slot, shape, bucket) the
    dispatch.json "aot" section {"host", "arch", "ms": {M: spec}, "chained": {level: {M: spec}}}; "ms" holds the plain
    launches, "chained" is there when the variant chains)."""
    items = plan(entries)
    report = AotReport()
    if not items:
        return report, {}

    def skip_all(reason: str) -> tuple[AotReport, dict]:
        report.skipped = [Problem(slot=e.slot, shape_key=e.shape_key, bucket=e.bucket, reason=reason)
                          for e in entries if e.language == LANGUAGE]
        return report, {}
    arch = arch_for(archs)
    if arch is None:
        return skip_all(f"no single device arch in the evidence ({archs}): JIT-compiled on the target")
    report.arch = arch
    tools = toolchain()
    if isinstance(tools, str):
        return skip_all(f"{tools}: JIT-compiled on the target")
    report.toolchain = tools
    cache = cache_root() / "aot"
    cache.mkdir(parents=True, exist_ok=True)
    keys = {it.name: _key(it, arch, tools) for it in items}
    records = {name: json.loads(p.read_text()) for name, key in keys.items() if (p := cache / f"{key}.json").exists()}
    todo = [it for it in items if it.name not in records]
    if todo:
        jobs = max(1, min(int(os.environ.get(JOBS_ENV) or min(os.cpu_count() or 1, MAX_JOBS)), len(todo)))
        chunks = [todo[i::jobs] for i in range(jobs)]
        with tempfile.TemporaryDirectory(prefix="kt-aot-out-") as out_s, ThreadPoolExecutor(jobs) as pool:
            out = Path(out_s)
            lines = {k: v for got in pool.map(lambda chunk: _run_child(chunk, arch, out), chunks)
                     for k, v in got.items()}
            for name, line in lines.items():
                records[name] = {k: line.get(k) for k in ("ok", "error", "jit_function", "constexprs", "runtime_args")}
                if line.get("ok"):  # only successes are cached: a failure may be this host's (a limit, a timeout)
                    shutil.copyfile(out / f"{name}.so", cache / f"{keys[name]}.so")
                    (cache / f"{keys[name]}.json").write_text(canonical(records[name]))
    sections: dict[tuple[str, str, str], dict[str, Any]] = {}
    failed: dict[tuple[str, str, str, int], list[tuple[int, str]]] = {}
    (package_dir / "aot").mkdir(parents=True, exist_ok=True)
    for it in items:
        key, record, where = keys[it.name], records[it.name], _where(it)
        if not record.get("ok"):
            failed.setdefault((*where, it.pdl), []).append((it.m, str(record.get("error"))))
            continue
        target = package_dir / "aot" / f"{it.name}.so"
        shutil.copyfile(cache / f"{key}.so", target)
        os.chmod(target, 0o644)  # zip entries carry the mode: independent of the umask
        section = sections.setdefault(where, {"host": platform.machine(), "arch": arch, "ms": {}})
        ms = section["ms"] if not it.pdl else section.setdefault("chained", {}).setdefault(str(it.pdl), {})
        ms[str(it.m)] = {"file": target.name, "function": it.name, "jit_function": record["jit_function"],
                         "constexprs": record["constexprs"], "runtime_args": record["runtime_args"]}
        report.builds += 1
        report.chained += it.pdl > 0
    for (slot, shape_key, bucket, pdl), fails in failed.items():
        ms = sorted(m for m, _ in fails)
        chained = f" chained (level {pdl})" if pdl else ""
        report.skipped.append(Problem(slot=slot, shape_key=shape_key, bucket=bucket,
                                      reason=f"M={spans(ms)}{chained} JIT-compiled on the target: {fails[0][1]}"))
    return report, sections
