"""One decode layer of a Kimi-K2-like model (TP8) on one GPU, all of it but the attention kernel: stock vs tuned.

    attention input (bench/attn_block.py: add + RMSNorm, fused_qkv_a, q_a / kv_a norms, q_b_proj)
    -> [the attention kernel itself: not a slot, not timed] -> o_proj
    -> MoE block (bench/moe_block.py: add + RMSNorm, router, routed experts, shared expert, sum)

The three parts run back to back in ONE CUDA graph per path and batch size, each on its own inputs: the same
kernels and launches as a layer, without the data flow between parts (no kernel's time depends on the values).
One copy of the weights: a layer moves more bytes than the L2 holds (the MoE block's experts alone, ~90 MB at
M = 1), so each replay starts cold, as the next layer would. Paths, timed by interleaved replay in one run, kernel
launches counted with torch.profiler:
- ``stock``: the attention input as vLLM's forward_native with cuBLAS, o_proj by cuBLAS, the MoE block with its
  routed experts as torch gather + bmm in the graph (moe_block's ``stock_graph``: vLLM is not installed on the
  GPU hosts here, and its eager per-expert loop cannot be captured);
- ``stock_fused_norm``: the same with torch's one-op norms in the attention input;
- ``tuned``: the slot kernels a tuning results file's winners name, each plain (attn_block's ``tuned``, the
  dense_gemm o_proj winner or cuBLAS where stock kept its bucket, moe_block's ``tuned``);
- ``tuned_best`` (sm_90+ for its two extras): the attention input chained by programmatic dependent launch
  (``tuned_pdl``) and the shared expert on its own stream (``tuned_side``);
- ``tuned_best_oproj_norm``, where the results file has a Triton winner of the oproj_residual_norm slot for the
  batch's bucket: ``tuned_best`` with o_proj and the MoE block's add + RMSNorm replaced by that winner (o_proj with
  the residual add and the norm in its kernels), the block starting at the router.
- ``tuned_shared_fused`` and ``tuned_shared_fused_chain``, where the results file has moe_experts_shared winners:
  ``tuned_best_oproj_norm`` and ``tuned_chain`` with the shared expert as the routed experts' 385th, picked by every
  token with weight 1 (moe_block's shared_fused_paths): the router writes that pick, one experts pass writes the
  block's output; no shared-expert launches, no side stream, no add.
- ``tuned_chain`` (sm_90+, beside ``tuned_best_oproj_norm``): the same kernels and configs with the chain carried
  on from the attention input through o_proj into the MoE block by programmatic dependent launch (each file's
  build(..., pdl=1) where it takes one): o_proj's GEMV fetches its first weights while the kernel ahead runs (here
  q_b_proj's, which in a model is the attention kernel: also a small latency-bound read), the router's GEMV
  fetches its first W tile while o_proj's norm runs, and w13 launches during the router's epilogue. The shared
  expert stays on its stream. The row says which links were chained; the outputs are checked as the others'.
  This bench feeds each part its own inputs, so an early read would go unseen here: the service's check of each
  chained form (workers/chain.py: activations poisoned until a held producer writes them) is what rules it out.
The outputs of each part are compared with stock's (rel-L2).

The stock MoE (gather + bmm) copies each token's experts before it multiplies: at M = 1 it moves about three
times the bytes of a kernel that reads each used expert once (vLLM's fused_moe), and at M >= 4 far more, so the
ratio to stock there says as much about that baseline as about the tuned kernels. Each row therefore also gives
every path's fraction of the layer's HBM floor: the weights it must read (the routed experts the tokens picked,
each once) over the copy bandwidth measured in the same run (workers/fingerprint.py's measure), which depends on
no baseline.

    python bench/decode_layer.py --winners bench/results/<date>-<hw>-decode-tuning-<what>.json [--batches 1,4,16]
    TRITON_INTERPRET=1 python bench/decode_layer.py --device cpu --tiny --attn-configs small.json --batches 1
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

import torch

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
import attn_block  # noqa: E402
import moe_block  # noqa: E402
from kernels.deployment import batch_bucket  # noqa: E402
from kernels.slots.base import rms_norm  # noqa: E402
from results_files import tuned_winners  # noqa: E402
from workers.chain import device_chains, takes_pdl  # noqa: E402
from workers.fingerprint import measure_bandwidth_gbs  # noqa: E402

O_PROJ_K = 1024  # K2 at TP8: 8 heads x v_head_dim 128
# Triton's interpreter: hidden 512 as moe_block's tiny spec, small latents
TINY_ATTN_DIMS = (512, 128, 64, 16, 96)
TINY_O_PROJ_K = 64


def oproj_configs(path: str | None) -> dict[int, tuple[str, dict]]:
    """{M: (file stem, config)} of the dense_gemm o_proj winners (stock-kept buckets left out: cuBLAS)."""
    if not path:
        return {}
    by_m = tuned_winners(path, lambda k: k == "dense_gemm/o_proj").get("dense_gemm/o_proj", {})
    for m, (stem, _) in by_m.items():
        if stem not in attn_block.GEMM_FILES:
            raise SystemExit(f"{path}: o_proj at M={m} was won by {stem}, which bench/decode_layer.py cannot run")
    return by_m


def bucket_winner(by_m: dict[int, tuple[str, dict]], m: int) -> tuple[str, dict] | None:
    """The (file stem, config) that won m's own batch bucket, or None where stock kept it: a smaller bucket's kernel
    is not what the table picked here."""
    mine = [mm for mm in by_m if batch_bucket(mm) == batch_bucket(m)]
    return by_m[mine[0]] if mine else None


ORN_KEY = "oproj_residual_norm/o_proj_residual_norm"
ORN_FILES = ("oproj_residual_norm_gemv", "oproj_residual_norm_fused")  # Triton files with one call signature


def oproj_norm_configs(path: str | None) -> dict[int, tuple[str, dict]]:
    """{M: (file stem, config)} of the oproj_residual_norm winners that are Triton files (stock or torch left out)."""
    if not path:
        return {}
    by_m = tuned_winners(path, lambda k: k == ORN_KEY).get(ORN_KEY, {})
    return {m: won for m, won in by_m.items() if won[0] in ORN_FILES}


def build_oproj_norm(m: int, n: int, k: int, eps: float, w: torch.Tensor, by_m: dict[int, tuple[str, dict]], dev, gen,
                     pdl: int = 0):
    """(fn, buffers, used) of m's bucket's oproj_residual_norm winner on o_proj's weight, or None without one; pdl=1
    builds it as a link of a chain where its file's build takes pdl (used then ends with whether it did)."""
    won = bucket_winner(by_m, m)
    if won is None:
        return None
    stem, cfg = won
    mod = moe_block.load(stem)
    chained = bool(pdl) and takes_pdl(mod)
    fn = mod.build(cfg, {"M": m, "N": n, "K": k, "eps": eps}, **({"pdl": pdl} if chained else {}))
    bf = torch.bfloat16
    buf = {"a": torch.randn(m, k, device=dev, generator=gen).to(bf),
           "residual": torch.randn(m, n, device=dev, generator=gen).to(bf),
           "norm_weight": (0.5 + torch.rand(n, device=dev, generator=gen)).to(bf),
           "out": torch.empty(m, n, device=dev, dtype=bf), "residual_out": torch.empty(m, n, device=dev, dtype=bf)}
    return lambda: fn(w=w, **buf), buf, [stem, cfg] + ([{"chained": chained}] if pdl else [])


def oproj_norm_rel_l2(buf: dict, w: torch.Tensor, eps: float) -> dict[str, float]:
    """The fused kernel's two outputs against torch in fp32 (o_proj, + residual, RMSNorm)."""
    r = buf["a"].float() @ w.float().t() + buf["residual"].float()
    return {"residual_out": attn_block.rel_l2(buf["residual_out"], r),
            "out": attn_block.rel_l2(buf["out"], rms_norm(r, buf["norm_weight"], eps))}


def build_oproj(m: int, n: int, k: int, by_m: dict[int, tuple[str, dict]], dev, gen):
    """(stock, tuned, buffers, used): o_proj by cuBLAS, and by the winner of m's own batch bucket (bucket_winner;
    cuBLAS where stock kept it)."""
    bf = torch.bfloat16
    buf = {"a": torch.randn(m, k, device=dev, generator=gen).to(bf),
           "w": (torch.randn(n, k, device=dev, generator=gen) * k ** -0.5).to(bf),
           "stock": torch.empty(m, n, device=dev, dtype=bf), "tuned": torch.empty(m, n, device=dev, dtype=bf)}
    won = bucket_winner(by_m, m)

    def stock():
        torch.matmul(buf["a"], buf["w"].t(), out=buf["stock"])
    if won is None:
        return stock, lambda: torch.matmul(buf["a"], buf["w"].t(), out=buf["tuned"]), buf, ["cuBLAS (stock kept)", {}]
    stem, cfg = won
    fn = attn_block.load(stem).build(cfg, {"M": m, "N": n, "K": k})
    return stock, lambda: fn(buf["a"], buf["w"], buf["tuned"]), buf, [stem, cfg]


def weight_bytes(dims, spec, o_k: int, experts_used: int) -> dict[str, int]:
    """The weights one layer call must read, by part (bf16; the router's fp32 bias): the HBM floor's bytes.
    Activations are left out: at M <= 64 they are under 1% of these."""
    h, ql, kvl, rope, qn = dims
    e_bytes = 2 * (2 * spec["I"] * spec["H"] + spec["H"] * spec["I"])
    return {"attention_input": 2 * ((ql + kvl + rope) * h + qn * ql + h + ql + kvl),
            "o_proj": 2 * spec["H"] * o_k,
            "moe": 2 * (spec["H"] + spec["E"] * spec["H"] + 3 * spec["I_shared"] * spec["H"]) + 4 * spec["E"]
            + experts_used * e_bytes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--winners", default=None, help="a bench/service_tuning.py results JSON: the tuned kernels")
    ap.add_argument("--attn-configs", default=None, help="attn_block's --configs form (CPU tests)")
    ap.add_argument("--moe-configs", default=None, help="moe_block's --configs form (CPU tests)")
    ap.add_argument("--oproj-norm-configs", default=None,
                    help='{"M": [file stem, config]} of oproj_residual_norm kernels, over the winners (CPU tests)')
    ap.add_argument("--batches", default="1,4,16")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--tiny", action="store_true", help="shapes small enough for Triton's interpreter")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("decode_layer.py: no CUDA device here (use --device cpu --tiny with TRITON_INTERPRET=1)")
    dims = TINY_ATTN_DIMS if args.tiny else attn_block.K2_TP8
    spec = moe_block.SPECS["tiny" if args.tiny else "k2-tp8"]
    o_k = TINY_O_PROJ_K if args.tiny else O_PROJ_K
    attn_cfg = json.loads(pathlib.Path(args.attn_configs).read_text()) if args.attn_configs else {}
    moe_cfg = json.loads(pathlib.Path(args.moe_configs).read_text()) if args.moe_configs else {}
    if args.winners:
        attn_cfg = {**attn_block.configs_from_tuning(args.winners), **attn_cfg}
        moe_cfg = {**moe_block.configs_from_tuning(args.winners), **moe_cfg}
    o_by_m = oproj_configs(args.winners)
    orn_by_m = oproj_norm_configs(args.winners)
    if args.oproj_norm_configs:
        given = json.loads(pathlib.Path(args.oproj_norm_configs).read_text())
        orn_by_m = {**orn_by_m, **{int(m): (stem, cfg) for m, (stem, cfg) in given.items()}}
    W = moe_block.make_weights(spec, dev, torch.Generator(device=dev).manual_seed(0))
    gbs = measure_bandwidth_gbs(dev)  # once, in this run: the floor's denominator
    rows = []
    for m in (int(b) for b in args.batches.split(",")):
        data = attn_block.make_sets(m, dims, 1, dev)
        attn, attn_used = attn_block.build_paths(m, dims, data, attn_cfg, dev)
        moe, buf, moe_files, _, _ = moe_block.build_paths(spec, m, W, moe_cfg, dev, after_norm=True)
        o_stock, o_tuned, o_buf, o_used = build_oproj(m, spec["H"], o_k, o_by_m, dev,
                                                      torch.Generator(device=dev).manual_seed(2000 + m))
        orn = build_oproj_norm(m, spec["H"], o_k, spec["eps"], o_buf["w"], orn_by_m, dev,
                               torch.Generator(device=dev).manual_seed(3000 + m))
        attn_best = "tuned_pdl" if "tuned_pdl" in attn else "tuned"
        parts = {"stock": (attn["stock"], o_stock, moe["stock_graph"]),
                 "stock_fused_norm": (attn["stock_fused_norm"], o_stock, moe["stock_graph"]),
                 "tuned": (attn["tuned"], o_tuned, moe["tuned"]),
                 "tuned_best": (attn[attn_best], o_tuned, moe["tuned_side"])}
        orn_chain = None
        if orn is not None:
            parts["tuned_best_oproj_norm"] = (attn[attn_best], orn[0], moe["tuned_side_after_norm"])
            if "tuned_chain_after_norm" in moe:
                orn_chain = build_oproj_norm(m, spec["H"], o_k, spec["eps"], o_buf["w"], orn_by_m, dev,
                                             torch.Generator(device=dev).manual_seed(3000 + m), pdl=1)
                parts["tuned_chain"] = (attn[attn_best], orn_chain[0], moe["tuned_chain_after_norm"])
            if "tuned_shared_fused_after_norm" in moe:
                parts["tuned_shared_fused"] = (attn[attn_best], orn[0], moe["tuned_shared_fused_after_norm"])
            if orn_chain is not None and "tuned_shared_fused_chain_after_norm" in moe:
                parts["tuned_shared_fused_chain"] = (attn[attn_best], orn_chain[0],
                                                     moe["tuned_shared_fused_chain_after_norm"])
        runs = {name: moe_block.capture(lambda fns=fns: [f() for f in fns], dev) for name, fns in parts.items()}
        times = moe_block.time_pair(runs, args.reps, dev)
        row = {"M": m, "tuned_kernels": {"attention_input": attn_used["tuned"], "o_proj": o_used, "moe": moe_files,
                                         **({"oproj_residual_norm": orn[2]} if orn else {}),
                                         **({"oproj_residual_norm_chain": orn_chain[2]} if orn_chain else {})},
               "tuned_best_attention_input": attn_best, "side_stream": dev.type == "cuda",
               **moe_block.measure_per_call(runs, times, dev, 1)}
        d = data[0]
        rel = attn_block.rel_l2
        row["rel_l2_vs_stock"] = {
            "attention_input": {p: max(rel(d[p][o], d["stock"][o]) for o in ("residual_out", "q", "kv"))
                                for p in ("tuned", attn_best)},
            "o_proj": rel(o_buf["tuned"], o_buf["stock"]),
            **({"oproj_residual_norm_vs_fp32": oproj_norm_rel_l2(orn[1], o_buf["w"], spec["eps"])} if orn else {}),
            **({"oproj_residual_norm_chain_vs_fp32": oproj_norm_rel_l2(orn_chain[1], o_buf["w"], spec["eps"])}
               if orn_chain else {}),
            # (the block's path, its output, the layer path that runs it): the block builds every path's buffers, and
            # only those of the paths this row ran are written (session 25's H200 row at M = 2, with no o_proj + norm
            # winner, reported the unwritten ones)
            "moe": {p: rel(buf[out], buf["stock_g_out"]) for p, out, layer in (
                ("tuned", "out", "tuned"), ("tuned_side", "out_side", "tuned_best"),
                ("tuned_chain", "out_chain", "tuned_chain"), ("tuned_shared_fused", "out_sf", "tuned_shared_fused"),
                ("tuned_shared_fused_chain", "out_sfc", "tuned_shared_fused_chain")) if layer in runs}}
        experts_used = int(buf["ids"].unique().numel())
        wb = weight_bytes(dims, spec, o_k, experts_used)
        floor_us = sum(wb.values()) / (gbs * 1e3)
        row["hbm_floor"] = {"weight_bytes": wb, "experts_used": experts_used, "copy_gbs": gbs, "floor_us": floor_us}
        for p in runs:
            row[p]["frac_of_floor"] = floor_us / row[p]["median_us"]
        # where the MoE outputs differ beyond rounding, it is routing: the stock router rounds its logits to bf16
        # before the sigmoid, the tuned one keeps fp32, so near-ties at the k-th expert fall either way (moe_block's
        # rows say the same); the referee is the top-k of fp32 logits of the same normed tokens
        stock_ids, _ = moe_block.stock_router(spec, buf["h"], W)
        fp32_ids = moe_block.fp32_router_ids(spec, buf["h"], W)
        row["topk_set_match"] = {"tuned_vs_stock": moe_block.topk_match(buf["ids"], stock_ids),
                                 **({"tuned_chain_vs_tuned": moe_block.topk_match(buf["ids_chain"], buf["ids"])}
                                    if "tuned_chain" in runs else {}),
                                 # the shared-fused routers' top-k columns (the last is the shared expert)
                                 **{f"{p}_vs_tuned": moe_block.topk_match(buf[ids][:, :-1], buf["ids"])
                                    for p, ids in (("tuned_shared_fused", "ids_sf"),
                                                   ("tuned_shared_fused_chain", "ids_sfc")) if p in runs},
                                 "tuned_vs_fp32_logits": moe_block.topk_match(buf["ids"], fp32_ids),
                                 "stock_vs_fp32_logits": moe_block.topk_match(stock_ids, fp32_ids)}
        for base in ("stock", "stock_fused_norm"):
            for name in (p for p in runs if p.startswith("tuned")):
                row[f"speedup_{name}_vs_{base}"] = row[base]["median_us"] / row[name]["median_us"]
        rows.append(row)
        print(f"M={m:3d}  "
              + "  ".join(f"{p} {row[p]['median_us']:7.2f} us ({row[p]['kernels_per_call']} k)" for p in runs)
              + f"  tuned_best x{row['speedup_tuned_best_vs_stock']:.2f} vs stock,"
              f" x{row['speedup_tuned_best_vs_stock_fused_norm']:.2f} vs one-op norms; floor {floor_us:.1f} us"
              f" ({row['hbm_floor']['experts_used']} experts): tuned_best at {row['tuned_best']['frac_of_floor']:.0%},"
              f" stock at {row['stock']['frac_of_floor']:.0%}", flush=True)
        # after every batch size: a run cut by its time limit keeps the rows it finished
        h, ql, kvl, rope, qn = dims
        moe_block.write_result(args.out, "decode_layer", dev, {
            "dims": {"hidden": h, "q_lora_rank": ql, "kv_lora_rank": kvl, "rope": rope, "q_b_n": qn, "o_proj_k": o_k},
            "moe_spec": spec, "winners": args.winners, "rows": rows})


if __name__ == "__main__":
    main()
