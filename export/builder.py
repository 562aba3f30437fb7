"""Render the latency_specialized package from collected winners and build its wheel.

Public entry point (what the REST route and the CLI call): ``export_package``.
Reproducible: the same database state gives the same wheel bytes. Every JSON file is written with
sorted keys, variant modules are named by content hash, no absolute path or wall-clock time goes
into the package, and the wheel's timestamps come from SOURCE_DATE_EPOCH, set to the newest
``finished_at`` of the exported runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import string
import subprocess
import sys
import tempfile
import tomllib
from collections import defaultdict
from importlib import metadata
from importlib import resources
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version
from pydantic import BaseModel
from sqlalchemy.orm import Session

from export import aot as aot_builds
from export import fused_moe_configs as fmc
from export.collect import Collection, bucket_lo, collect
from export.coverage import slower, unchecked, untuned
from export.errors import ExportError, ExportRefused, Problem
from export.record import record_export
from kernels.deployment import BATCH_BUCKETS

REPO_ROOT = Path(__file__).resolve().parents[1]
FORMAT = 1
ZIP_EPOCH_MIN = 315532800  # 1980-01-01: the earliest time a zip entry can carry
TEMPLATE_FILES = ("__init__.py", "aot.py", "dispatch.py", "plugin.py", "selftest.py", "reference.py")
LANGUAGE_DEPENDENCIES = {"triton": "triton", "cute": "nvidia-cutlass-dsl"}
# what loading the ahead-of-time builds needs beside CuTe DSL's runtime library: the tvm-ffi runtime, from the
# version whose load_module CuTe DSL 4.3.5 calls (keep_module_alive) on
AOT_RUNTIME_DEPENDENCY = "apache-tvm-ffi>=0.1.6,<0.2"
BUILD_TIMEOUT_S = 300


class ExportResult(BaseModel):
    wheel_path: str
    wheel_filename: str
    sha256: str
    package: str
    version: str
    hardware: str
    model: str
    entries: int
    stock_entries: int
    partial: bool
    skipped: list[Problem]
    # buckets of the default batch sizes with no run at all: served by stock, to be tuned (export/coverage.py)
    untuned: list[Problem] = []
    # tuned entries whose bucket holds batch sizes no run checked (export/coverage.py): selftest --every-m checks them
    unchecked: list[Problem] = []
    # tuned entries measured slower than stock at some M of their bucket (export/coverage.py): stock serves those M
    slower: list[Problem] = []
    fused_moe_files: list[str]
    export_id: int
    # CuTe DSL kernels compiled ahead of time (export/aot.py): how many, for which arch, and what is left to JIT
    aot: aot_builds.AotReport = aot_builds.AotReport()


def slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")
    if not s:
        raise ExportError(f"{text!r} gives an empty package-name part")
    return s


def package_name(model: str, hardware: str) -> str:
    return f"kerneltune_ls_{slug(model)}_{slug(hardware)}"


def export_package(session: Session, *, hardware: str, model: str, out_dir: Path | str, allow_partial: bool = False,
                   version: str = "0.1.0", every_m: bool = False, aot: bool = True) -> ExportResult:
    """Export the winners of ``model`` on ``hardware`` as a wheel in ``out_dir`` and record it.

    Raises ExportRefused (listing each problem) when a winner lacks evidence, has evidence from other
    hardware, or nothing beats stock; with ``allow_partial`` the qualifying entries are exported and
    the rest listed in the result and the manifest (nothing qualifying still refuses). With ``every_m`` a
    winner qualifies only where its runs checked every M its bucket serves (bucket checks fill the rest). With
    ``aot`` (the default) the CuTe DSL entries are compiled for the evidence's arch here, at every M their buckets
    serve, so the target JIT-compiles nothing (export/aot.py; without the toolchain the result says why not).
    """
    try:
        version = str(Version(version))
    except InvalidVersion:
        raise ExportError(f"version {version!r} is not a PEP 440 version") from None
    got = collect(session, hardware=hardware, model=model)
    if every_m:  # the entries with unchecked M become problems: refused, or with allow_partial left to stock
        held = unchecked(got)
        keys = {(p.slot, p.shape_key, p.bucket) for p in held}
        got.problems += held
        got.entries = [e for e in got.entries if (e.slot, e.shape_key, e.bucket) not in keys]
    _refuse_if_needed(got, hardware=hardware, model=model, allow_partial=allow_partial)
    pkg = package_name(model, hardware)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kt-export-") as tmp:
        staging = Path(tmp) / "src"
        built = (aot_builds.build(got.entries, _archs(got), staging / pkg) if aot
                 else (aot_builds.AotReport(), {}))
        moe_files = render_package(staging, pkg, got, hardware=hardware, model=model, version=version,
                                   partial=bool(got.problems), aot=built)
        wheel = build_wheel(staging, Path(tmp) / "dist", source_date_epoch(got))
        target = out / wheel.name
        shutil.copyfile(wheel, target)
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    skipped = [p.model_dump() for p in got.problems]
    row = record_export(session, hardware=hardware, model=model, version=version, wheel_filename=target.name,
                        sha256=digest, entries=len(got.entries), partial=bool(got.problems), skipped=skipped)
    return ExportResult(wheel_path=str(target), wheel_filename=target.name, sha256=digest, package=pkg, version=version,
                        hardware=hardware, model=model, entries=len(got.entries), stock_entries=len(got.stock),
                        partial=bool(got.problems), skipped=got.problems, untuned=untuned(got), unchecked=unchecked(got),
                        slower=slower(got), fused_moe_files=moe_files, export_id=row.id, aot=built[0])


def _refuse_if_needed(got: Collection, *, hardware: str, model: str, allow_partial: bool) -> None:
    what = f"export of {model!r} on {hardware!r}"
    if not got.entries and not got.problems and not got.stock:
        raise ExportRefused(f"{what} refused: no winners recorded for this model and hardware", [])
    if not got.entries:
        stock = [Problem(slot=s.slot, shape_key=s.shape_key, bucket=s.bucket, reason="the stock kernel is the winner")
                 for s in got.stock]
        raise ExportRefused(f"{what} refused: nothing beats stock with complete evidence", got.problems + stock)
    if got.problems and not allow_partial:
        raise ExportRefused(f"{what} refused: {len(got.problems)} winner(s) cannot be exported "
                            "(allow_partial exports the rest)", got.problems)


def source_date_epoch(got: Collection) -> int:
    from datetime import datetime
    stamps = [datetime.fromisoformat(r.finished_at).timestamp() for e in got.entries for r in e.runs if r.finished_at]
    return max([ZIP_EPOCH_MIN] + [int(s) for s in stamps])


# --- rendering ---------------------------------------------------------------------------------------

def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chmod(path, 0o644)  # zip entries carry the mode: make it independent of the umask


def _json(data: Any) -> str:
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


AotBuilt = tuple[aot_builds.AotReport, dict[tuple[str, str, str], dict[str, Any]]]


def render_package(root: Path, pkg: str, got: Collection, *, hardware: str, model: str, version: str,
                   partial: bool, aot: AotBuilt | None = None) -> list[str]:
    """Write the package sources under ``root`` (pyproject.toml + ``pkg/``); returns fused_moe file names.
    ``aot``: export/aot.build's report and dispatch sections (its shared objects are already in ``pkg/aot``)."""
    report, sections = aot or (aot_builds.AotReport(), {})
    src = root / pkg
    templates = resources.files("export") / "templates"
    for name in TEMPLATE_FILES:
        _write(src / name, (templates / name).read_text())
    _write(src / "kernels" / "__init__.py", '"""Winning variant sources, one module per content hash."""\n')
    for e in got.entries:
        _write(src / "kernels" / f"{e.module}.py", e.source if e.source.endswith("\n") else e.source + "\n")
    moe = fused_moe_files(got)
    for name, doc in moe.items():
        _write(src / "fused_moe_configs" / name, _json(doc))
    _write(src / "dispatch.json", _json(dispatch_table(pkg, got, hardware=hardware, model=model, aot=sections)))
    _write(src / "manifest.json", _json(manifest(pkg, got, hardware=hardware, model=model, version=version,
                                                 partial=partial, moe_files=sorted(moe), aot=report)))
    languages = sorted({e.language for e in got.entries} & set(LANGUAGE_DEPENDENCIES))
    deps = ["torch"] + [LANGUAGE_DEPENDENCIES[lang] for lang in languages]
    if report.builds:
        # the shared objects link CuTe DSL's runtime library of the version that compiled them
        cute_dep = LANGUAGE_DEPENDENCIES[aot_builds.LANGUAGE]
        deps = [d for d in deps if d != cute_dep] + [f"{cute_dep}=={report.toolchain[cute_dep]}",
                                                     AOT_RUNTIME_DEPENDENCY]
    pyproject = string.Template((templates / "pyproject.toml.tmpl").read_text()).substitute(
        dist_name=pkg, version=version, package=pkg,
        description=f"kerneltune latency_specialized decode kernels for {model} on {hardware}",
        dependencies=", ".join(json.dumps(d) for d in deps),
        extras=f"vllm = {json.dumps(['vllm'])}")
    _write(root / "pyproject.toml", pyproject)
    return sorted(moe)


def _archs(got: Collection) -> list[str]:
    return sorted({str(f.get("arch")) for f in got.fingerprints.values() if f.get("arch")})


def dispatch_table(pkg: str, got: Collection, *, hardware: str, model: str,
                   aot: dict[tuple[str, str, str], dict[str, Any]] | None = None) -> dict[str, Any]:
    slots: dict[str, dict[str, Any]] = defaultdict(dict)
    for s in got.stock:
        slots[s.slot].setdefault(s.shape_key, {"shape": s.shape, "buckets": {}})["buckets"][s.bucket] = {"stock": True}
    for e in got.entries:
        slots[e.slot].setdefault(e.shape_key, {"shape": e.shape, "buckets": {}})["buckets"][e.bucket] = {
            "module": e.module, "language": e.language, "config": e.config, "variant_hash": e.variant_hash, "ms": e.ms}
        if e.slower_ms:  # measured slower than stock there: dispatch runs stock at these M
            slots[e.slot][e.shape_key]["buckets"][e.bucket]["stock_ms"] = e.slower_ms
        if (aot or {}).get((e.slot, e.shape_key, e.bucket)):
            slots[e.slot][e.shape_key]["buckets"][e.bucket]["aot"] = aot[e.slot, e.shape_key, e.bucket]
    return {"format": FORMAT, "package": pkg, "hardware": hardware, "model": model,
            "buckets": [list(b) for b in BATCH_BUCKETS], "slots": slots}


def _service() -> dict[str, Any]:
    try:
        version = metadata.version("kerneltune")
    except metadata.PackageNotFoundError:
        version = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]

    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=20,
                                  check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"name": "kerneltune", "version": version, "git_commit": git("rev-parse", "HEAD"),
            "git_dirty": None if status is None else bool(status)}


def manifest(pkg: str, got: Collection, *, hardware: str, model: str, version: str, partial: bool,
             moe_files: list[str], aot: aot_builds.AotReport | None = None) -> dict[str, Any]:
    fps = got.fingerprints
    variants = {e.module: {"content_hash": e.variant_hash, "slot": e.slot, "language": e.language, "author": e.author,
                           "agent": e.agent, "parent_hash": e.parent_hash, "notes": e.notes} for e in got.entries}
    entries = [{"slot": e.slot, "shape_key": e.shape_key, "bucket": e.bucket, "module": e.module, "config": e.config,
                "evidence": {"winner": e.winner.model_dump(), "runs": [r.model_dump() for r in e.runs],
                             "fingerprint": fps[e.winner.fingerprint_id]}}
               for e in sorted(got.entries, key=lambda e: (e.slot, e.shape_key, bucket_lo(e.bucket)))]
    return {
        "format": FORMAT, "package": pkg, "version": version, "model": model,
        "hardware": {"hardware_class": hardware,
                     "archs": _archs(got),
                     "device_names": sorted({str(f.get("name")) for f in fps.values() if f.get("name")}),
                     "fingerprints": sorted(fps)},
        "service": _service(),
        "variants": variants,
        "authors": sorted({e.author for e in got.entries}),
        "agents": sorted({e.agent for e in got.entries if e.agent}),
        "entries": entries,
        "stock_entries": [s.model_dump(exclude={"shape"}) for s in got.stock],
        "partial": partial,
        "skipped": [p.model_dump() for p in got.problems],
        "fused_moe_configs": moe_files,
        "aot": (aot or aot_builds.AotReport()).model_dump(),
    }


def fused_moe_files(got: Collection) -> dict[str, dict[str, Any]]:
    """vLLM tuned-config files for MoE entries whose variant maps onto vLLM's Triton fused_moe kernel."""
    groups: dict[tuple[int, int, str, str, str | None], dict[int, dict[str, int]]] = defaultdict(dict)
    for e in got.entries:
        if e.slot != fmc.MOE_SLOT:
            continue
        mapping = fmc.declared_mapping(e.source, set(e.config_space_keys))
        if mapping is None:
            continue
        fp = got.fingerprints[e.winner.fingerprint_id]
        dims = e.shape["dims"]
        key = (int(dims["E"]), int(dims["I"]), str(fp.get("name")), e.shape.get("dtype", "bfloat16"),
               (fp.get("libraries") or {}).get("triton"))
        params = fmc.vllm_params(e.config, mapping)
        for m in e.ms:
            groups[key][m] = params
    out = {}
    for (n_exp, n, device, dtype, triton_version), per_m in sorted(groups.items(), key=lambda kv: str(kv[0])):
        name, doc = fmc.render(n_exp, n, device, dtype, per_m, triton_version)
        out[name] = doc
    return out


# --- building ------------------------------------------------------------------------------------

def build_wheel(project: Path, dist: Path, epoch: int) -> Path:
    """``pip wheel`` (setuptools backend, no network, no build isolation) with fixed timestamps."""
    dist.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch), "PYTHONHASHSEED": "0", "PIP_NO_INPUT": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
           "--wheel-dir", str(dist), str(project)]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ExportError(f"wheel build did not finish within {BUILD_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        raise ExportError(f"wheel build failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-4000:]}")
    wheels = sorted(dist.glob("*.whl"))
    if len(wheels) != 1:
        raise ExportError(f"wheel build produced {len(wheels)} wheels: {[w.name for w in wheels]}")
    return wheels[0]
