"""What a single kernel can reach on this device, timed exactly as the harness times a variant.

The HBM floor (bytes / copy bandwidth) ignores what every kernel pays before and after its bytes
stream: the launch inside a CUDA graph, the first DRAM round trip, the tail of the last wave. For a
4.7 MB weight (q_b_proj: a 1.1 us floor) that fixed part is most of the time. This script measures it
with the harness's own timer (workers/timers: a CUDA graph of back-to-back calls over rotating input
sets larger than 2x the L2, interleaved rounds) for:

- ``empty``: a kernel that does nothing (one CTA) - the graph's per-launch cost;
- ``touch``: one CTA per SM, each reading one 16-byte vector - launch plus one DRAM round trip;
- ``read``: the fastest streaming read of N bytes this script finds (a Triton sum over bf16, every load
  of a program unrolled so all are in flight at once; a small grid over tile, unroll and warps) for
  the weight sizes of the decode slots.

Per size it reports the floor, the best read and floor / best read: the largest "fraction of the HBM
floor" any single kernel that reads those bytes can show here. Writes
bench/results/<date>-<device>-latency-floor.{json,md} (or --out).

    python bench/latency_floor.py                      # on the GPU
    TRITON_INTERPRET=1 python bench/latency_floor.py --device cpu --sizes 0.05 --quick   # CPU smoke
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import math
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from search.landscape import git_commit  # noqa: E402
from workers.bench import choose_input_sets  # noqa: E402
from workers.fingerprint import llc_bytes, measure_bandwidth_gbs  # noqa: E402
from workers.protocol import BenchSettings  # noqa: E402
from workers.timers import timer_for  # noqa: E402

# Weight bytes of the decode slots of the Kimi-K2-like spec at TP8 (bf16), in MB (1e6 bytes).
SIZES_MB = {"q_b_proj 1536x1536": 4.72, "router gate 384x7168": 5.51, "shared expert w13+w2": 11.01,
            "o_proj 7168x1024": 14.68, "fused_qkv_a 2112x7168": 30.28, "moe top-8 experts": 88.08,
            "lm_head 20480x7168": 293.6}
BLOCKS = (1024, 2048, 4096)
UNROLLS = (1, 2, 4, 8)
WARPS = (4, 8)


@triton.jit
def empty_kernel(out_ptr):
    pass


@triton.jit
def touch_kernel(src_ptr, out_ptr, STRIDE: tl.constexpr):
    pid = tl.program_id(0)
    v = tl.load(src_ptr + pid * STRIDE + tl.arange(0, 8))
    tl.store(out_ptr + pid, tl.sum(v.to(tl.float32), axis=0))


@triton.jit
def read_kernel(src_ptr, out_ptr, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    pid = tl.program_id(0)
    base = src_ptr + pid * (BLOCK * UNROLL) + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in tl.static_range(UNROLL):  # unrolled: the loads do not wait for each other's sums
        acc += tl.load(base + i * BLOCK).to(tl.float32)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


def time_one(device: torch.device, run: Any, n_sets: int, settings: BenchSettings) -> float:
    """Median per-call microseconds of ``run(i)`` under the harness's timer."""
    samples, _ = timer_for(device, settings).measure({"k": run}, lambda name, i: None, n_sets, settings)
    return statistics.median(samples["k"])


def measure_size(device: torch.device, nbytes: int, llc: int, settings: BenchSettings,
                 configs: list[tuple[int, int, int]]) -> dict[str, Any]:
    """The fastest read of ``nbytes`` (rounded down to whole programs) over ``configs``."""
    best: dict[str, Any] | None = None
    for block, unroll, warps in configs:
        per_prog = block * unroll
        programs = (nbytes // 2) // per_prog
        if programs < 1:
            continue
        elems = programs * per_prog
        n_sets = choose_input_sets(elems * 2, llc, 1 << 62, settings)
        srcs = [torch.randn(elems, device=device).to(torch.bfloat16) for _ in range(n_sets)]
        outs = [torch.empty(programs, device=device, dtype=torch.float32) for _ in range(n_sets)]

        def run(i: int, b: int = block, u: int = unroll, w: int = warps, p: int = programs) -> None:
            read_kernel[(p,)](srcs[i], outs[i], BLOCK=b, UNROLL=u, num_warps=w)

        us = time_one(device, run, n_sets, settings)
        # The sum is the check that every byte was read (a kernel the compiler emptied would not match).
        expect = srcs[0].float().view(programs, per_prog).sum(dim=1)
        run(0)
        ok = bool(torch.allclose(outs[0], expect, rtol=1e-3, atol=1e-2 * math.sqrt(per_prog)))
        row = {"block": block, "unroll": unroll, "num_warps": warps, "programs": programs, "bytes": elems * 2,
               "input_sets": n_sets, "us": us, "sum_ok": ok}
        if ok and (best is None or us < best["us"]):
            best = row
        del srcs, outs
    if best is None:
        raise RuntimeError(f"no read config passed its sum check for {nbytes} bytes")
    return best


def fixed_costs(device: torch.device, llc: int, settings: BenchSettings, sms: int) -> dict[str, float]:
    out = torch.empty(max(sms, 1), device=device, dtype=torch.float32)
    empty_us = time_one(device, lambda i: empty_kernel[(1,)](out), 1, settings)
    stride = 1 << 20  # elements: each CTA reads its own line, far from the others
    n_sets = choose_input_sets(sms * stride * 2, llc, 1 << 62, settings)
    srcs = [torch.zeros(sms * stride, device=device, dtype=torch.bfloat16) for _ in range(n_sets)]
    touch_us = time_one(device, lambda i: touch_kernel[(sms,)](srcs[i], out, STRIDE=stride), n_sets, settings)
    return {"empty_us": empty_us, "touch_us": touch_us, "touch_ctas": sms}


def markdown(doc: dict[str, Any]) -> str:
    h = doc["header"]
    lines = [f"# Latency floor of one kernel: {h['device']}", "",
             f"- date: {h['date']}; commit: `{h['commit']}`; command: `{h['command']}`",
             f"- copy bandwidth (read + write, as the harness's floor): {h['bandwidth_gbs']:.0f} GB/s; "
             f"L2/LLC {h['llc_bytes'] / 2**20:.0f} MiB; timer: the harness's ({h['timer']})",
             f"- empty kernel (1 CTA), timed like a variant: **{doc['fixed']['empty_us']:.2f} us**; one 16-byte read per "
             f"CTA on {doc['fixed']['touch_ctas']} CTAs: **{doc['fixed']['touch_us']:.2f} us**", "",
             "| weights | MB | HBM floor us | best read us | floor / best read | best config (block, unroll, warps, CTAs) |",
             "| --- | ---: | ---: | ---: | ---: | --- |"]
    for r in doc["rows"]:
        b = r["best"]
        lines.append(f"| {r['name']} | {r['mb']:.2f} | {r['floor_us']:.2f} | {b['us']:.2f} | "
                     f"{r['max_fraction_of_floor']:.0%} | {b['block']}, {b['unroll']}, {b['num_warps']}, {b['programs']} |")
    lines += ["", "floor / best read is the largest fraction of the HBM floor that a single kernel reading these "
              "bytes reached here, so it bounds what any variant of that slot can show in the harness. Timings "
              "are medians of the harness's rounds; the configs are this script's small grid, not a proof of "
              "the optimum."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--sizes", default=None, help="comma-separated MB (default: the decode slots' weights)")
    ap.add_argument("--quick", action="store_true", help="one read config and 3 rounds (a smoke test)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    command = shlex.join(["bench/latency_floor.py", *(sys.argv[1:] if argv is None else argv)])
    device = torch.device(args.device)
    sizes = ({f"{float(s):g} MB": float(s) for s in args.sizes.split(",")} if args.sizes else SIZES_MB)
    settings = (BenchSettings(warmup=1, min_rounds=3, min_time_s=0, input_sets=2) if args.quick
                else BenchSettings(warmup=2, min_rounds=15, min_time_s=0.2))
    configs = [(BLOCKS[0], UNROLLS[0], WARPS[0])] if args.quick else list(itertools.product(BLOCKS, UNROLLS, WARPS))
    llc = llc_bytes(device)
    gbs = measure_bandwidth_gbs(device)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        name, sms = props.name, props.multi_processor_count
    else:
        name, sms = "cpu", 4
    doc: dict[str, Any] = {"header": {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                                      "device": name, "commit": git_commit(ROOT), "command": command,
                                      "bandwidth_gbs": gbs, "llc_bytes": llc, "timer": timer_for(device, settings).name,
                                      "torch": torch.__version__, "triton": triton.__version__},
                           "fixed": fixed_costs(device, llc, settings, sms), "rows": []}
    for label, mb in sizes.items():
        best = measure_size(device, int(mb * 1e6), llc, settings, configs)
        floor_us = best["bytes"] / (gbs * 1e9) * 1e6
        doc["rows"].append({"name": label, "mb": mb, "floor_us": floor_us, "best": best,
                            "max_fraction_of_floor": floor_us / best["us"]})
        print(f"{label}: floor {floor_us:.2f} us, best read {best['us']:.2f} us ({floor_us / best['us']:.0%})",
              flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"{doc['header']['date'][:10]}-{name.lower().replace('nvidia ', '').replace(' ', '-')}-latency-floor"
    (args.out / f"{stem}.json").write_text(json.dumps(doc, indent=1) + "\n")
    (args.out / f"{stem}.md").write_text(markdown(doc))
    print(f"wrote {args.out / stem}.json and .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
