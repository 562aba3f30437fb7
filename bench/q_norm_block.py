"""The q path of one MLA decode layer after q_a_proj: q_a_layernorm, then q_b_proj, paths side by side.

Paths, each captured as one CUDA graph per batch size and timed by graph replay in one run (interleaved,
median of the replays, as bench/moe_block.py), kernel launches counted with torch.profiler:
- ``stock``: RMSNorm.forward_native (the rmsnorm_gemm slot's stock) then torch.matmul (cuBLAS);
- ``stock_fused_norm``: torch.nn.functional.rms_norm (one fused op) then torch.matmul: the stronger unfused
  baseline, nearest to vLLM's own CUDA rms_norm + cuBLAS;
- ``fused``: kernels/variants/triton/rmsnorm_gemm_fused.py, one launch (configs from a tuning results file);
- ``q_b_proj_alone``: torch.matmul on already normalised input: what the GEMM alone costs, no norm at all.
Each graph runs its path over --sets copies of the weights and inputs in turn (more bytes than the L2
holds), so weights come from HBM as in a real layer; times are per call (replay / sets).

    python bench/q_norm_block.py --winners bench/results/<date>-h200-decode-tuning-r.json [--batches 1,4,16]
    TRITON_INTERPRET=1 python bench/q_norm_block.py --device cpu --dims 96,768 --sets 2 --reps 2  # functional
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import sys

import torch

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from moe_block import capture, measure_per_call, time_pair, write_result  # noqa: E402
from results_files import tuned_winners  # noqa: E402

SLOT_KEY = "rmsnorm_gemm/q_a_norm_q_b_proj"
K2_TP8 = (1536, 1536)  # (N, K): 8 heads x 192 per rank, q_lora_rank 1536
EPS = 1e-6


def load_fused():
    spec = importlib.util.spec_from_file_location("_q_norm_fused", REPO / "kernels/variants/triton/rmsnorm_gemm_fused.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def winner_configs(path: str | None) -> dict[int, dict]:
    """{M: config} of the fused kernel's winning buckets in a bench/service_tuning.py results file."""
    if not path:
        return {}
    return {m: config for m, (stem, config) in tuned_winners(path, lambda k: k == SLOT_KEY).get(SLOT_KEY, {}).items()
            if stem == "rmsnorm_gemm_fused"}


def pick(configs: dict[int, dict], m: int, default: dict) -> dict:
    below = [k for k in sorted(configs) if k <= m]
    return configs[below[-1]] if below else (configs[min(configs)] if configs else default)


def build_paths(m, n, k, sets, config, fused_mod, dev):
    g = torch.Generator().manual_seed(1000 + m)
    data = [{"x": torch.randn((m, k), generator=g).to(dev, torch.bfloat16),
             "g": (0.5 + torch.rand(k, generator=g)).to(dev, torch.bfloat16),
             "w": (torch.randn((n, k), generator=g) * k ** -0.5).to(dev, torch.bfloat16),
             **{o: torch.empty((m, n), device=dev, dtype=torch.bfloat16) for o in ("stock", "fn", "fused", "alone")}}
            for _ in range(sets)]
    fused = fused_mod.build(config, {"M": m, "N": n, "K": k, "eps": EPS})

    def stock():
        for d in data:
            xf = d["x"].float()
            normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(torch.bfloat16) * d["g"]
            torch.matmul(normed, d["w"].t(), out=d["stock"])

    def stock_fused_norm():
        for d in data:
            torch.matmul(torch.nn.functional.rms_norm(d["x"], (k,), d["g"], EPS), d["w"].t(), out=d["fn"])

    def fused_path():
        for d in data:
            fused(d["x"], d["g"], d["w"], d["fused"])

    def alone():
        for d in data:
            torch.matmul(d["x"], d["w"].t(), out=d["alone"])

    return {"stock": stock, "stock_fused_norm": stock_fused_norm, "fused": fused_path, "q_b_proj_alone": alone}, data


def rel_l2(out, d):
    x = d["x"].double()
    ref = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * d["g"].double()) @ d["w"].double().t()
    return ((out.double() - ref).norm() / ref.norm()).item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--winners", default=None, help="a bench/service_tuning.py results JSON: the fused kernel's configs")
    ap.add_argument("--batches", default="1,4,16")
    ap.add_argument("--sets", type=int, default=24, help="weight/input copies per graph (24 x 4.7 MB > the 60 MB L2)")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--dims", default=",".join(map(str, K2_TP8)), help="N,K")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("q_norm_block.py: no CUDA device here (use --device cpu with TRITON_INTERPRET=1)")
    n, k = (int(v) for v in args.dims.split(","))
    fused_mod = load_fused()
    configs = winner_configs(args.winners)
    rows = []
    for m in (int(b) for b in args.batches.split(",")):
        config = pick(configs, m, fused_mod.DEFAULT_CONFIG)
        paths, data = build_paths(m, n, k, args.sets, config, fused_mod, dev)
        runs = {name: capture(fn, dev) for name, fn in paths.items()}
        times = time_pair(runs, args.reps, dev)
        row = {"M": m, "fused_config": config, "sets": args.sets, **measure_per_call(runs, times, dev, args.sets)}
        row["rel_l2"] = {name: max(rel_l2(d[o], d) for d in data)
                         for name, o in (("stock", "stock"), ("stock_fused_norm", "fn"), ("fused", "fused"))}
        for base in ("stock", "stock_fused_norm", "q_b_proj_alone"):
            row[f"speedup_fused_vs_{base}"] = row[base]["median_us"] / row["fused"]["median_us"]
        rows.append(row)
        print(f"M={m:3d}  " + "  ".join(f"{p} {row[p]['median_us']:7.2f} us ({row[p]['kernels_per_call']} k)" for p in runs)
              + f"  fused x{row['speedup_fused_vs_stock']:.2f} vs stock, x{row['speedup_fused_vs_stock_fused_norm']:.2f}"
              f" vs F.rms_norm+cuBLAS  relL2 {row['rel_l2']['fused']:.2e}", flush=True)
    write_result(args.out, "q_norm_block", dev, {"dims": {"N": n, "K": k, "eps": EPS}, "winners": args.winners,
                                                 "rows": rows})


if __name__ == "__main__":
    main()
