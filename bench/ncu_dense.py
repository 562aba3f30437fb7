"""Hardware counters of dense_gemm kernels, read by Nsight Compute on the device: what limits a winner.

The service's tables give each kernel's time against cuBLAS and the HBM floor; this says why a kernel sits where
it does: DRAM throughput, achieved occupancy, registers and grid, and the warp stall breakdown, for each item
and for cuBLAS (torch.matmul) at the same shape and M, one Nsight Compute process per item (so each CSV holds
that item's kernels only). Nsight Compute replays each kernel with the caches flushed, outside any CUDA graph:
read its durations for the DRAM side, and the service's tables for time.

    python bench/ncu_dense.py --out $OUT \\
        --item fused_qkv_a:4:kernels/variants/cute/dense_gemm_ksplit_gemv.py:'{"ROWS": 4, "KWARPS": 4, "UNROLL": 4}' \\
        --item fused_qkv_a:4:stock

Writes <date>-<device>-ncu-dense.json (every metric of the sections, per kernel) and .md (the headline metrics),
with date, device, commit and command. Needs `ncu` on the PATH and a GPU it can read counters of.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import importlib.util
import io
import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats", "MemoryWorkloadAnalysis")
# the metrics the Markdown table shows, by the name Nsight Compute's sections give them
HEADLINE = ("Duration", "DRAM Throughput", "Memory Throughput", "Achieved Occupancy", "Theoretical Occupancy",
            "Registers Per Thread", "Grid Size", "Block Size", "Warp Cycles Per Issued Instruction")


def parse_item(text: str) -> dict[str, Any]:
    """SHAPE:M:stock or SHAPE:M:FILE:CONFIG_JSON."""
    shape, m, rest = text.split(":", 2)
    if rest == "stock":
        return {"shape": shape, "m": int(m), "file": None, "config": None}
    file, config = rest.split(":", 1)
    return {"shape": shape, "m": int(m), "file": file, "config": json.loads(config)}


def shape_dims(name: str) -> dict[str, int]:
    from kernels.deployment import Deployment
    from kernels.slots.dense_gemm import DenseGemm

    shapes = {s.name: s for s in DenseGemm().shapes(Deployment())}
    return dict(shapes[name].dims)


def child(item: dict[str, Any]) -> None:
    """Build the item's kernel, warm it up outside the profiled range, then launch it once inside it."""
    import torch

    dims = shape_dims(item["shape"])
    m, n, k = item["m"], dims["N"], dims["K"]
    g = torch.Generator().manual_seed(0)
    x = (torch.randn((m, k), generator=g)).to("cuda", torch.bfloat16)
    w = (torch.randn((n, k), generator=g) * k ** -0.5).to("cuda", torch.bfloat16)
    out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
    if item["file"] is None:
        def run() -> None:
            torch.matmul(x, w.t(), out=out)
    else:
        spec = importlib.util.spec_from_file_location("ncu_variant", ROOT / item["file"])
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        run_kernel = mod.build(item["config"], {**dims, "M": m, "slot": "dense_gemm", "name": item["shape"],
                                                "dtype": "bfloat16"})

        def run() -> None:
            run_kernel(x, w, out)
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    run()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def profile(item: dict[str, Any], ncu: str) -> str:
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--csv", "--page", "details",
           *[a for s in SECTIONS for a in ("--section", s)], sys.executable, __file__, "--child", json.dumps(item)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    # ncu prints its own ==PROF== lines before the CSV; the CSV starts at the header row
    text = proc.stdout[proc.stdout.find('"ID"'):] if '"ID"' in proc.stdout else ""
    if proc.returncode != 0 or not text:
        raise RuntimeError(f"ncu failed (rc {proc.returncode}) for {item}: {proc.stderr[-2000:]}{proc.stdout[-2000:]}")
    return text


def kernels_of(text: str) -> list[dict[str, Any]]:
    """Per profiled kernel launch in ncu's `--csv --page details` output: its name and
    {section/metric: (value, unit)}."""
    rows = list(csv.DictReader(io.StringIO(text)))
    need = {"ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value"}
    if rows and not need <= rows[0].keys():
        raise RuntimeError(f"ncu's CSV lacks {sorted(need - rows[0].keys())}; its header: {text.splitlines()[0]}")
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        k = out.setdefault(r["ID"], {"kernel": r["Kernel Name"], "metrics": {}})
        k["metrics"][f'{r["Section Name"]}/{r["Metric Name"]}'] = [r["Metric Value"], r["Metric Unit"]]
    return list(out.values())


def headline(kernel: dict[str, Any]) -> dict[str, str]:
    got: dict[str, str] = {}
    for key, (value, unit) in kernel["metrics"].items():
        name = key.split("/", 1)[1]
        if name in HEADLINE and name not in got:
            got[name] = f"{value} {unit}".strip()
    return got


def markdown(doc: dict[str, Any]) -> str:
    lines = [f"# Nsight Compute counters of dense_gemm kernels ({doc['device']})", "",
             f"- date: {doc['date']}; commit: `{doc['commit']}`; command: `{doc['command']}`",
             "- each kernel replayed by ncu with the caches flushed, outside a CUDA graph (`--clock-control none`); "
             "times for the tables come from the service, not from here", "",
             "| shape | M | kernel of | kernel | " + " | ".join(HEADLINE) + " |",
             "| --- | ---: | --- | --- | " + " | ".join("---:" for _ in HEADLINE) + " |"]
    for it in doc["items"]:
        who = "cuBLAS (stock)" if it["file"] is None else f"{Path(it['file']).name} {json.dumps(it['config'])}"
        if it.get("error"):
            lines.append(f"| {it['shape']} | {it['m']} | {who} | not profiled: {it['error'][:200]!r} |"
                         + " |" * len(HEADLINE))
        for k in it["kernels"]:
            h = headline(k)
            lines.append(f"| {it['shape']} | {it['m']} | {who} | `{k['kernel'][:40]}` | "
                         + " | ".join(h.get(name, "-") for name in HEADLINE) + " |")
    return "\n".join(lines) + "\n"


def profile_items(items: list[dict[str, Any]], run: Callable[[dict[str, Any]], str],
                  budget_s: float | None) -> None:
    """Fill each item's kernels (or its error) from `run`, ncu's CSV of that item, in order; once budget_s
    seconds have passed no further item is started."""
    t0 = time.monotonic()
    for it in items:
        if budget_s is not None and time.monotonic() - t0 > budget_s:
            it["kernels"], it["error"] = [], f"not started: the {budget_s:g} s budget was spent"
            continue
        try:
            it["kernels"] = kernels_of(run(it))
        except (RuntimeError, subprocess.TimeoutExpired) as exc:  # one item's failure loses no other
            it["kernels"], it["error"] = [], f"{type(exc).__name__}: {str(exc)[-3000:]}"
        if not it["kernels"] and "error" not in it:
            it["error"] = "ncu profiled no kernel in the item's range"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--item", action="append", default=[], help="SHAPE:M:stock or SHAPE:M:FILE:CONFIG_JSON")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--budget-s", type=float, default=None,
                    help="start no item after this many seconds (the rest are listed as not profiled), so a "
                         "caller's timeout still finds the files written")
    args = ap.parse_args(argv)
    if args.child:
        child(json.loads(args.child))
        return 0
    ncu = shutil.which("ncu")
    if ncu is None:
        sys.exit("ncu_dense.py: no ncu on the PATH")
    import torch

    from search.landscape import git_commit

    items = [parse_item(t) for t in args.item]
    profile_items(items, lambda it: profile(it, ncu), args.budget_s)
    device = torch.cuda.get_device_name(0)
    doc = {"date": dt.datetime.now(dt.timezone.utc).isoformat(), "device": device,
           "commit": git_commit(ROOT),
           "command": "bench/ncu_dense.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])),
           "items": items}
    # the header's (UTC) date names the file, so the name and the header never disagree
    stem = f"{doc['date'][:10]}-{device.split()[1].lower() if len(device.split()) > 1 else 'gpu'}-ncu-dense"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = markdown(doc)
    (out / f"{stem}.json").write_text(json.dumps(doc, indent=1))
    (out / f"{stem}.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
