"""What the compiler says about the winning kernels: registers, spills, shared memory and theoretical
occupancy per kernel for sm_90a, from ``ptxas -v`` on the PTX each winner compiles to. No GPU needed.

Reads the winners of H200 service-tuning results files (each lists its jobs' variant files), compiles
every winner's (variant, config, shape, M) ahead of time exactly as the worker's compile stage does
(Triton: the variant's ``compile_ptx``; CuTe DSL: the backend's CPU build), runs Triton's bundled
ptxas on the PTX and writes bench/results/<date>-sm90a-compiler-report[-<plan or results stem>].{json,md}.

    python bench/compiler_report.py bench/results/2026-12-03-h200-decode-tuning-{f,h,i}.json
    python bench/compiler_report.py --plan bench/plans/h200_decode_all.json   # pre-flight of a device plan

With --plan, every (config, shape, M) a service-tuning plan will run, for its Triton variants (CuTe DSL
needs its own package here), is compiled the same way before any device time is spent on it: a config
that fails to compile or spills shows up here, not as a verdict on the GPU.

Occupancy is the CUDA occupancy calculator's arithmetic for one SM of an H100/H200-class sm_90
part: 65,536 registers (allocated per warp in units of 256), 2,048 threads, 32 blocks, 228 KiB of
shared memory (1 KiB reserved per block). It ignores the grid (computed inside each variant's
build(), not known here): a decode GEMV of one short wave is latency-bound whatever its occupancy,
so read the occupancy beside the winner's fraction of the HBM floor, which the table repeats.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "bench"))  # service_tuning's plan helpers, also when this file is imported

from kernels.deployment import Deployment  # noqa: E402
from kernels.catalogue import get_slot  # noqa: E402
from results_files import variant_files  # noqa: E402

SM90 = {"regs": 65536, "reg_unit": 256, "threads": 2048, "blocks": 32, "warps": 64,
        "smem": 228 * 1024, "smem_reserved": 1024}


def ptxas_path() -> str:
    """The ptxas Triton itself assembles sm_90 with (it reads the PTX version Triton emits)."""
    from triton.backends.nvidia.compiler import get_ptxas

    return str(get_ptxas(90).path)


def cuobjdump_path() -> str:
    """The cuobjdump Triton resolves (bundled beside its ptxas, or TRITON_CUOBJDUMP_PATH)."""
    from triton import knobs

    return str(knobs.nvidia.cuobjdump.path)


def ptx_of(variant: Path, language: str, config: dict[str, Any], shape: dict[str, Any]) -> str:
    if language == "triton":
        spec = importlib.util.spec_from_file_location(f"kt_report_{variant.stem}", variant)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.compile_ptx(dict(config), dict(shape), "sm_90a")
    if language == "cute":
        # the whole PTX from the AOT compile: the PTX a build carries is trimmed for storage
        from kernels.backends.base import load_module
        from kernels.backends.cute_backend import CuteBackend

        with tempfile.TemporaryDirectory() as tmp:
            module = load_module(variant.read_text(), f"kt_report_{variant.stem}", os.path.join(tmp, variant.name))
            ptx = CuteBackend().aot_ptx(module, dict(config), dict(shape), "sm_90a")
        if ptx is None:
            raise RuntimeError(f"{variant.name} declares neither compile_target nor compile_ptx")
        return ptx
    raise ValueError(f"no AOT compile for {language}")


def _threads_per_entry(ptx: str) -> dict[str, int]:
    """Threads per block from each entry's .maxntid / .reqntid directive (Triton and CuTe emit one)."""
    out = {}
    for m in re.finditer(r"\.entry\s+(\w+)", ptx):
        head = ptx[m.end(): ptx.find("{", m.end())]
        if n := re.search(r"\.(?:maxntid|reqntid)\s+([\d,\s]+)", head):
            out[m.group(1)] = math.prod(int(v) for v in n.group(1).replace(" ", "").split(",") if v)
    return out


def ptxas_report(ptx: str) -> list[dict[str, Any]]:
    """One entry per kernel: registers, spill bytes, static shared memory and threads per block. A
    variant with several kernels returns their PTX modules one after another: each is assembled alone."""
    modules = [m for m in re.split(r"(?m)^(?=\.version)", ptx) if ".entry" in m]
    return [k for module in modules for k in _ptxas_module(module)]


# SASS global loads and their bytes: plain (into registers) and cp.async (into shared memory)
_LOAD = re.compile(r"\b(?:LDGSTS|LDG)(?:\.[A-Z0-9_]+)*")
_LOAD_BYTES = {"128": 16, "64": 8, "U16": 2, "S16": 2, "U8": 1, "S8": 1}
# the first floating-point math instruction ends a kernel's opening burst of loads
_MATH = re.compile(r"\b(HMMA|HGMMA|FFMA|FMUL|FADD|HFMA2|HMUL2|HADD2)\b")


def load_bursts(sass: str) -> dict[str, dict[str, int]]:
    """Per kernel in `cuobjdump -sass` output: the global loads (count and bytes) issued before its first
    floating-point math instruction. Whatever order the source gives, ptxas decides how many loads go out
    before the first one is consumed; for a memory-bound decode kernel that burst times the threads per SM
    is the first round trip's bytes in flight (ptxas interleaves the rest with the math)."""
    out: dict[str, dict[str, int]] = {}
    for fn in re.split(r"(?m)^\s*Function : ", sass)[1:]:
        name = fn.split(None, 1)[0]
        loads = nbytes = 0
        for line in fn.splitlines()[1:]:
            if _MATH.search(line):
                break
            if m := _LOAD.search(line):
                loads += 1
                mods = m.group(0).split(".")[1:]
                nbytes += next((_LOAD_BYTES[x] for x in mods if x in _LOAD_BYTES), 4)
        out[name] = {"burst_loads": loads, "burst_bytes": nbytes}
    return out


def _ptxas_module(ptx: str) -> list[dict[str, Any]]:
    threads = _threads_per_entry(ptx)
    with tempfile.TemporaryDirectory() as tmp:
        path, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        Path(path).write_text(ptx)
        proc = subprocess.run([ptxas_path(), "-arch=sm_90a", "-v", "-o", cubin, path],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"ptxas failed: {proc.stderr.strip()[:500]}")
        dump = subprocess.run([cuobjdump_path(), "-sass", cubin], capture_output=True, text=True, timeout=300)
        bursts = load_bursts(dump.stdout) if dump.returncode == 0 else {}
    kernels: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for line in proc.stderr.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            current = {"kernel": m.group(1), "threads": threads.get(m.group(1)), "spill_store_bytes": 0,
                       "spill_load_bytes": 0, "smem_bytes": 0}
            kernels.append(current)
        elif current is not None and (m := re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)):
            current["spill_store_bytes"], current["spill_load_bytes"] = int(m.group(1)), int(m.group(2))
        elif current is not None and (m := re.search(r"Used (\d+) registers", line)):
            current["registers"] = int(m.group(1))
            if s := re.search(r"(\d+) bytes smem", line):
                current["smem_bytes"] = int(s.group(1))
    for k in kernels:
        k.update(occupancy(k.get("registers"), k.get("threads"), k.get("smem_bytes", 0)))
        if burst := bursts.get(k["kernel"]):
            k.update(burst)
            if k.get("threads") and k.get("blocks_per_sm"):
                # an upper bound: the grid may give an SM fewer blocks than fit on it
                k["burst_kib_per_sm"] = round(burst["burst_bytes"] * k["threads"] * k["blocks_per_sm"] / 1024, 1)
    return kernels


def occupancy(regs: int | None, threads: int | None, smem: int) -> dict[str, Any]:
    """Blocks per SM and the fraction of its 64 warp slots; ``smem`` is the static shared memory only
    (Triton's and CuTe's pipelined tiles are dynamic: their PTX declares an extern array)."""
    if not regs or not threads:
        return {"blocks_per_sm": None, "occupancy": None, "limited_by": "unknown (no thread count in the PTX)"}
    warps = math.ceil(threads / 32)
    regs_per_warp = math.ceil(regs * 32 / SM90["reg_unit"]) * SM90["reg_unit"]
    limits = {
        "registers": SM90["regs"] // (regs_per_warp * warps),
        "threads": SM90["threads"] // threads,
        "blocks": SM90["blocks"],
        "shared memory": SM90["smem"] // (smem + SM90["smem_reserved"]),
    }
    blocks = min(limits.values())
    return {"blocks_per_sm": blocks, "occupancy": round(blocks * warps / SM90["warps"], 3),
            "limited_by": ", ".join(k for k, v in limits.items() if v == blocks)}


def winners_to_compile(results: list[Path]) -> list[dict[str, Any]]:
    todo: dict[str, dict[str, Any]] = {}
    for path in results:
        data = json.loads(path.read_text())
        files = variant_files(data)  # this session's jobs and those of the sessions its DB resumed
        dep = Deployment(**data["plan"]["deployment"])
        for w in data["winners"]:
            ev = w.get("evidence")
            if w["is_stock"] or not ev:
                continue
            if ev["variant_id"] not in files:
                raise SystemExit(f"{path.name}: winner variant {ev['variant_id']} is not a job of this session or of "
                                 "a results file along its --resume-db chain")
            slot = get_slot(w["slot"])
            shape = next(s for s in slot.shapes(dep) if s.name == w["shape_name"])
            item = {"results": path.name, "slot": w["slot"], "shape": w["shape_name"], "bucket": w["batch_bucket"],
                    "m": ev["m"], "language": ev["language"], "file": files[ev["variant_id"]], "config": ev["config"],
                    "speedup": ev.get("speedup"), "frac_of_floor": ev.get("frac_of_floor"),
                    "build_shape": shape.as_build_arg(ev["m"])}
            todo[json.dumps([item["file"], item["config"], item["build_shape"]], sort_keys=True)] = item
    return list(todo.values())


def plan_to_compile(plan_path: Path) -> list[dict[str, Any]]:
    """The Triton (config, shape, M) triples a bench/service_tuning.py plan submits, planned by the API's own
    job planner (service/routers/jobs.py _plan), so the validity rules are the service's. A search item's
    configs are chosen as it runs: it is listed, not compiled."""
    from kernels.variant_meta import declared_space
    from search.space import ConfigSpace
    from service.routers.jobs import _plan
    from service_tuning import item_deployment

    plan = json.loads(plan_path.read_text())
    todo = []
    for item in plan["variants"]:
        if item["language"] not in ("triton", "cute"):  # the languages ptx_of compiles without a GPU
            continue
        if item.get("search"):
            print(f"{item['file']}: a search ({item['search'].get('strategy')}): its configs are not known "
                  "before it runs; not compiled", file=sys.stderr)
            continue
        dep = Deployment(**item_deployment(plan, item))
        space = ConfigSpace.parse(declared_space((REPO / item["file"]).read_text()) or {})
        shapes = [s for s in get_slot(item["slot"]).shapes(dep) if not item.get("shapes") or s.name in item["shapes"]]
        for run in _plan(space, item["configs"], shapes, dep.token_counts(), limit=1 << 30):
            todo.append({"results": plan_path.name, "slot": item["slot"], "shape": run.shape.name, "bucket": None,
                         "m": run.m, "language": item["language"], "file": item["file"], "config": run.config,
                         "speedup": None, "frac_of_floor": None, "build_shape": run.shape.as_build_arg(run.m)})
    return todo


def library_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name, dist in (("triton", "triton"), ("cutlass_dsl", "nvidia-cutlass-dsl")):
        try:
            from importlib.metadata import version

            out[name] = version(dist)
        except Exception:
            out[name] = None
    return out


def markdown(header: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    subject = "the winners of a results file" if "--plan" not in header["command"] else "a device plan, before it runs"
    out = [f"# Compiler report for {subject} (sm_90a, {header['ptxas']})", "",
           f"- date: {header['date']}; commit: `{header['commit']}`; command: `{header['command']}`",
           "- from ptxas -v on the PTX each winner compiles to (no GPU); occupancy per SM from registers, "
           "threads per block and static shared memory (Triton's and CuTe's pipelined tiles are dynamic "
           "shared memory and not counted)",
           f"- compiled here with Triton {header['libraries'].get('triton')} and nvidia-cutlass-dsl "
           f"{header['libraries'].get('cutlass_dsl')}; the winners were timed on the H200 with the versions in "
           "their results files (Triton 3.6 there): register counts can differ by compiler version", "",
           "- load burst: the global loads (and their bytes per thread) the SASS issues before its first "
           "floating-point math instruction; KiB/SM multiplies it by the threads of the blocks that fit on an SM "
           "(an upper bound: the grid may give an SM fewer)", "",
           "| slot / shape | M | variant | kernel | threads | regs | spills (st/ld B) | smem B | blocks/SM | occupancy | limited by | load burst (B/thread) | burst KiB/SM | speedup | of floor |",
           "| --- | ---: | --- | --- | ---: | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['slot']} / {r['shape']} | {r['m']} | {Path(r['file']).name} | error: {r['error'][:80]} |"
                       + " |" * 11)
            continue
        for k in r["kernels"]:
            occ = f"{k['occupancy']:.0%}" if k.get("occupancy") is not None else "-"
            out.append(f"| {r['slot']} / {r['shape']} | {r['m']} | {Path(r['file']).name} | `{k['kernel'][:40]}` | "
                       f"{k.get('threads') or '-'} | {k.get('registers', '-')} | {k['spill_store_bytes']}/{k['spill_load_bytes']} | "
                       f"{k['smem_bytes']} | {k.get('blocks_per_sm') or '-'} | {occ} | {k['limited_by']} | "
                       f"{_burst(k)} | {k.get('burst_kib_per_sm', '-')} | "
                       + ("- | - |" if r["speedup"] is None else f"{r['speedup']:.2f}x | {(r['frac_of_floor'] or 0):.0%} |"))
    return "\n".join(out) + "\n"


def _burst(k: dict[str, Any]) -> str:
    return f"{k['burst_loads']} ({k['burst_bytes']})" if "burst_loads" in k else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="*", type=Path, help="service-tuning results JSON files")
    ap.add_argument("--plan", type=Path, help="a service-tuning plan: compile what it will run (pre-flight)")
    ap.add_argument("--out", type=Path, default=REPO / "bench/results")
    args = ap.parse_args()
    if bool(args.plan) == bool(args.results):
        ap.error("give results files or --plan, not both")
    os.environ.pop("TRITON_INTERPRET", None)
    rows = []
    for item in (plan_to_compile(args.plan) if args.plan else winners_to_compile(args.results)):
        try:
            ptx = ptx_of(REPO / item["file"], item["language"], item["config"], item["build_shape"])
            item["kernels"] = ptxas_report(ptx)
        except Exception as exc:  # one winner that no longer compiles must not hide the others
            item["error"] = f"{type(exc).__name__}: {exc}"
        rows.append(item)
        print(item["slot"], item["shape"], item["m"], Path(item["file"]).name,
              item.get("error") or [(k["kernel"][:30], k.get("registers"), k.get("occupancy")) for k in item["kernels"]],
              flush=True)
    version = subprocess.run([ptxas_path(), "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-2]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    header = {"what": "kerneltune compiler report", "date": dt.date.today().isoformat(), "commit": commit,
              "command": " ".join([Path(sys.argv[0]).as_posix()] + sys.argv[1:]), "ptxas": version, "arch": "sm_90a",
              "libraries": library_versions(),
              "sm_limits": SM90}
    args.out.mkdir(parents=True, exist_ok=True)
    # one file per plan or per winners table: a later table must not overwrite an earlier one's report
    what = f"-plan-{args.plan.stem}" if args.plan else (f"-{args.results[0].stem}" if len(args.results) == 1 else "")
    stem = args.out / f"{header['date']}-sm90a-compiler-report{what}"
    stem.with_suffix(".json").write_text(json.dumps({**header, "rows": rows}, indent=1) + "\n")
    stem.with_suffix(".md").write_text(markdown(header, rows))
    print(f"wrote {stem}.json and .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
