"""Chained dense GEMM builds (build's pdl) against their plain builds on an sm_90+ GPU, in the race they exist for.

A chained kernel may start while the kernel ahead of it still runs and must read its x only after
griddepcontrol.wait. Here the kernel ahead is add_rmsnorm_fused built as a chain's head (it lets the next kernel
launch at once) and it writes that very x. Per plan item (file, shape, M, config) and chain level, two CUDA graphs
run --sets pairs of (producer, GEMM) over rotating weights: one with the plain build, one with the chained build.
Before each of --rounds replays every producer input is redrawn, so a chained kernel that read x early would
differ. The chained outputs must equal the plain ones bit for bit (same kernel, same order of sums); the plain ones
are also compared with torch's matmul of the same x. Then the two graphs are timed, interleaved: producer + GEMM,
plain against chained.

    python bench/chain_check.py --plan bench/plans/chain_zx.json [--levels 1,2] [--out $OUT]

Writes chain_check.json (date, commit, command, device, one row per case); exit status 1 when any case differs.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
from typing import Any

import torch

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from attn_block import load  # noqa: E402
from moe_block import capture, time_pair, write_result  # noqa: E402
from workers.chain import device_chains  # noqa: E402

EPS = 1e-6


def cases(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """One case per (file, shape, M, config) of the plan's dense_gemm items, with the shape's N and K."""
    from kernels.deployment import Deployment
    from kernels.slots.dense_gemm import DenseGemm

    dims = {s.name: s.dims for s in DenseGemm().shapes(Deployment(**plan["deployment"]))}
    out = []
    for item in plan["variants"]:
        if item["slot"] != "dense_gemm":
            raise SystemExit(f"chain_check.py checks dense_gemm items only, not {item['slot']}")
        for name in item["shapes"]:
            for m in item["batch_sizes"]:
                for config in item["configs"]:
                    out.append({"file": item["file"], "shape": name, "M": m, "N": dims[name]["N"],
                                "K": dims[name]["K"], "config": config})
    return out


def producer_for(k: int, m: int) -> Any:
    """add_rmsnorm_fused as the chain's head over rows of k: one pass, the fewest warps the constraint allows."""
    block = 1 << (k - 1).bit_length()
    warps = next(w for w in (4, 8, 16) if block // (32 * w) <= 64)
    return load("add_rmsnorm_fused").build(
        {"BLOCK_H": block, "num_warps": warps}, {"H": k, "eps": EPS, "M": m}, pdl=True)


_BUILT: dict[tuple, Any] = {}


def built(case: dict[str, Any], level: int) -> Any:
    """The case's kernel at this chain level (0: plain), compiled once per run."""
    key = (case["file"], json.dumps(case["config"], sort_keys=True), case["M"], case["N"], case["K"], level)
    if key not in _BUILT:
        mod = load(pathlib.Path(case["file"]).stem)
        shape = {"M": case["M"], "N": case["N"], "K": case["K"]}
        _BUILT[key] = mod.build(case["config"], shape, pdl=level) if level else mod.build(case["config"], shape)
    return _BUILT[key]


def check_case(case: dict[str, Any], level: int, sets: int, rounds: int, reps: int, dev: torch.device) -> dict:
    m, n, k = case["M"], case["N"], case["K"]
    plain, chained = built(case, 0), built(case, level)
    head = producer_for(k, m)
    g = torch.Generator(device=dev).manual_seed(11 + m)
    bf = dict(device=dev, dtype=torch.bfloat16)
    data = [{"x_in": torch.empty((m, k), **bf), "res": torch.empty((m, k), **bf),
             "g": (0.5 + torch.rand(k, device=dev, generator=g)).to(torch.bfloat16),
             "x": torch.empty((m, k), **bf), "res_out": torch.empty((m, k), **bf),
             "w": (torch.randn((n, k), device=dev, generator=g) * k ** -0.5).to(torch.bfloat16),
             "plain": torch.empty((m, n), **bf), "chained": torch.empty((m, n), **bf)} for _ in range(sets)]

    def path(gemm, out):
        def run():
            for d in data:
                head(d["x_in"], d["res"], d["g"], d["x"], d["res_out"])
                gemm(d["x"], d["w"], d[out])
        return run

    def redraw():
        for d in data:
            d["x_in"].normal_(generator=g)
            d["res"].normal_(generator=g)

    redraw()
    graphs = {"plain": capture(path(plain, "plain"), dev), "chained": capture(path(chained, "chained"), dev)}
    equal, worst_diff, worst_rel = True, 0.0, 0.0
    for _ in range(rounds):
        redraw()
        graphs["plain"]()
        xs = [d["x"].clone() for d in data]
        redraw()  # the chained graph's producers write x afresh: stale x from the plain replay would show
        graphs["chained"]()
        torch.cuda.synchronize()
        redo = [d["x"].float() @ d["w"].float().t() for d in data]
        for d, ref in zip(data, redo):
            # the plain build on the chained replay's x, for the bitwise comparison
            want = torch.empty_like(d["plain"])
            plain(d["x"], d["w"], want)
            torch.cuda.synchronize()
            same = torch.equal(want, d["chained"])
            equal &= same
            worst_diff = max(worst_diff, (want.float() - d["chained"].float()).abs().max().item())
            worst_rel = max(worst_rel, ((d["chained"].float() - ref).norm() / ref.norm()).item())
        for x, d in zip(xs, data):  # the plain replay's own outputs against its x
            ref = x.float() @ d["w"].float().t()
            worst_rel = max(worst_rel, ((d["plain"].float() - ref).norm() / ref.norm()).item())
    times = time_pair(graphs, reps, dev)  # interleaved replays; a replay runs `sets` pairs
    pair_us = {p: t["median_us"] / sets for p, t in times.items()}
    return {**case, "level": level, "sets": sets, "rounds": rounds, "bitwise_equal": equal,
            "max_abs_diff": worst_diff, "max_rel_l2_vs_matmul": worst_rel,
            "pair_us": pair_us, "speedup_chained": pair_us["plain"] / pair_us["chained"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", required=True, help="a device plan of dense_gemm items (bench/plans/*.json)")
    ap.add_argument("--levels", default="1,2")
    ap.add_argument("--sets", type=int, default=8, help="(producer, GEMM) pairs per graph, each with its own W")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    dev = torch.device("cuda")
    if not device_chains(dev):
        raise SystemExit("chain_check.py: programmatic dependent launch needs an sm_90+ GPU")
    plan = json.loads(pathlib.Path(args.plan).read_text())
    rows = []
    for case in cases(plan):
        for level in (int(v) for v in args.levels.split(",")):
            row = check_case(case, level, args.sets, args.rounds, args.reps, dev)
            rows.append(row)
            print(f"{pathlib.Path(case['file']).stem} {case['shape']} M={case['M']} pdl={level}: "
                  f"{'bitwise equal' if row['bitwise_equal'] else 'DIFFERS (max %.3g)' % row['max_abs_diff']}, "
                  f"rel-L2 vs matmul {row['max_rel_l2_vs_matmul']:.2e}, pair {row['pair_us']['plain']:.2f} -> "
                  f"{row['pair_us']['chained']:.2f} us", flush=True)
    write_result(args.out, "chain_check", dev, {"plan": args.plan, "rows": rows})
    return 0 if all(r["bitwise_equal"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
