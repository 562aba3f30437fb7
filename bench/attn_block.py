"""The attention input of one MLA decode layer (Kimi-K2-like, TP8) on one GPU, stock vs tuned, side by side.

    add + RMSNorm (input_layernorm) -> fused_qkv_a GEMM -> split -> q_a_layernorm -> q_b_proj
                                                                 \\-> kv_a_layernorm (the rope key passes through)

What runs before the attention kernel itself: outputs q [M, heads*192], the normalised latent kv [M, 512],
the rope key [M, 64] and the new residual. Paths, each captured as one CUDA graph per batch size over
--sets rotating copies of the weights (more bytes than the L2 holds), timed by interleaved graph replay in
one run, kernel launches counted with torch.profiler (as bench/moe_block.py):
- ``stock``: torch as vLLM's forward_native: the norms as elementwise ops, the GEMMs through cuBLAS;
- ``stock_fused_norm``: the same with torch's one-op norms (F.rms_norm; the add then the norm), nearest to
  vLLM's CUDA fused_add_rms_norm / rms_norm + cuBLAS;
- ``tuned``: the slot kernels a tuning results file's winners name: add_rmsnorm_fused, the dense_gemm
  winner for fused_qkv_a at this M (a Triton or CuTe DSL kernel; cuBLAS where stock kept the bucket), and
  rmsnorm_gemm_fused as the mla_norms_gemm slot: q_a_layernorm folded into q_b_proj and the kv latent's norm in
  the same launch (the mla_norms_gemm winner's config, else the rmsnorm_gemm winner's: the same kernel);
- ``tuned_kv_apart``: the same, but rmsnorm_gemm_fused without the kv latent, which F.rms_norm normalises
  apart (the tuned path before the mla_norms_gemm slot), so the fusion's gain is read in the same run;
- ``tuned_pdl`` and ``tuned_kv_apart_pdl`` (sm_90+): those kernels and configs chained by programmatic
  dependent launch, the seed system's weight prefetch: add_rmsnorm lets the GEMV launch at once, the GEMV
  fetches its first W (the ring's first STAGES - 1 steps, the K-split GEMV's first chunk) while add_rmsnorm runs
  and waits for it only before it reads x, and rmsnorm_gemm is launched while the GEMV runs and waits for it.
  A fused_qkv_a winner that cannot be chained (cuBLAS, or a file whose build takes no pdl) runs plainly inside
  the chain, and the row says so. (The L2-prefetch level, pdl=2, never helped here: bench/chain_check.py keeps
  it.)
The tuned outputs are compared with the stock ones (rel-L2 per output).

    python bench/attn_block.py --winners bench/results/<date>-h200-decode-tuning-r.json [--batches 1,4,16]
    TRITON_INTERPRET=1 python bench/attn_block.py --device cpu --dims 256,128,64,16,96 --configs small.json --sets 2
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import pathlib
import sys

import torch

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from moe_block import capture, measure_per_call, time_pair, write_result  # noqa: E402
from results_files import tuned_winners  # noqa: E402
from workers.chain import device_chains, takes_pdl  # noqa: E402

K2_TP8 = (7168, 1536, 512, 64, 1536)  # hidden, q_lora_rank, kv_lora_rank, rope dim, heads/TP x (128 + 64)
EPS = 1e-6
VARIANTS = REPO / "kernels" / "variants"
BLOCK_FILES = {"add_rmsnorm": "add_rmsnorm_fused", "rmsnorm_gemm": "rmsnorm_gemm_fused",
               "mla_norms_gemm": "rmsnorm_gemm_fused"}
PATHS = ("stock", "fn", "tuned", "tuned_pdl", "tuned_kv_apart", "tuned_kv_apart_pdl")
# the fused_qkv_a winners this block can run: Triton's, and CuTe DSL's (x, w, out) GEMVs
GEMM_FILES = ("dense_gemm_gemv", "dense_gemm_splitk", "dense_gemm_swapab", "dense_gemm_warp_gemv",
              "dense_gemm_ksplit_gemv", "dense_gemm_mma_gemv", "dense_gemm_ring_gemv")


@functools.cache  # a block builds each file's kernels for several paths and batch sizes: one import of it
def load(stem: str):
    path = next(p for p in (VARIANTS / "triton" / f"{stem}.py", VARIANTS / "cute" / f"{stem}.py") if p.exists())
    spec = importlib.util.spec_from_file_location(f"_attn_{stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def configs_from_tuning(path: str) -> dict[str, dict[str, list]]:
    """{"add_rmsnorm" | "rmsnorm_gemm" | "mla_norms_gemm" | "fused_qkv_a": {M: [file stem, config]}} from a
    results file's winners.
    A winner from a file this block cannot run is an error: timing another bucket's kernel in its place would
    report a block the table does not hold."""
    keys = {"add_rmsnorm/add_rmsnorm_hidden": "add_rmsnorm", "rmsnorm_gemm/q_a_norm_q_b_proj": "rmsnorm_gemm",
            "mla_norms_gemm/q_b_proj_kv_norm": "mla_norms_gemm", "dense_gemm/fused_qkv_a": "fused_qkv_a"}
    out: dict[str, dict[str, list]] = {}
    for key, by_m in tuned_winners(path, keys.__contains__).items():
        name = keys[key]
        for m, (stem, config) in by_m.items():
            if stem not in (BLOCK_FILES.get(name), *GEMM_FILES):
                raise SystemExit(f"{path}: {name} at M={m} was won by {stem}, which bench/attn_block.py cannot run")
            out.setdefault(name, {})[str(m)] = [stem, config]
    return out


def pick(configs: dict[str, dict[str, list]], name: str, m: int, default_stem: str | None) -> list:
    """[file stem, config] for this M: the largest winning M <= m, else the smallest; else the default
    file with its own default config ([None, None] for fused_qkv_a: cuBLAS)."""
    c = configs.get(name, {})
    if not c:
        return [default_stem, {}]
    keys = sorted(int(k) for k in c)
    below = [k for k in keys if k <= m]
    return c[str(below[-1] if below else keys[0])]


def make_sets(m, dims, sets, dev):
    h, ql, kvl, rope, qn = dims
    g = torch.Generator().manual_seed(7 + m)

    def bf(shape, std=1.0):
        return (torch.randn(shape, generator=g) * std).to(dev, torch.bfloat16)

    def nw(n):
        return (0.5 + torch.rand(n, generator=g)).to(dev, torch.bfloat16)

    out = []
    for _ in range(sets):
        d = {"x": bf((m, h)), "residual": bf((m, h)), "w_in": nw(h), "w_qkv_a": bf((ql + kvl + rope, h), h ** -0.5),
             "w_qa": nw(ql), "w_qb": bf((qn, ql), ql ** -0.5), "w_kva": nw(kvl)}
        for p in PATHS:  # each path writes its own outputs
            d[p] = {"normed": torch.empty((m, h), device=dev, dtype=torch.bfloat16),
                    "residual_out": torch.empty((m, h), device=dev, dtype=torch.bfloat16),
                    "qkv": torch.empty((m, ql + kvl + rope), device=dev, dtype=torch.bfloat16),
                    "q": torch.empty((m, qn), device=dev, dtype=torch.bfloat16),
                    "kv": torch.empty((m, kvl), device=dev, dtype=torch.bfloat16)}
        out.append(d)
    return out


def native_norm(x, w):  # RMSNorm.forward_native on an fp32 x
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)).to(w.dtype) * w


def build_kernels(m, dims, configs, pdl: int = 0, kv_fused: bool = True):
    """(add, qkv_a, q_norm_gemm, used) for this M; pdl > 0 builds each kernel whose build takes pdl as a link of
    the chain (at that level; the chain's head, add_rmsnorm, on or off), the rest plainly, and `used` says which
    were. kv_fused: q_norm_gemm is the mla_norms_gemm form (it normalises the kv latent too)."""
    h, ql, kvl, rope, qn = dims

    def make(stem, cfg, shape, level):
        mod = load(stem)
        chained = level > 0 and takes_pdl(mod)
        return (mod.build(cfg, shape, pdl=level) if chained else mod.build(cfg, shape)), chained

    add_stem, add_cfg = pick(configs, "add_rmsnorm", m, "add_rmsnorm_fused")
    add, add_chained = make(add_stem, add_cfg, {"H": h, "eps": EPS, "M": m}, int(pdl > 0))
    gemm_stem, gemm_cfg = pick(configs, "fused_qkv_a", m, None)
    qkv_a, gemm_chained = make(gemm_stem, gemm_cfg, {"M": m, "N": ql + kvl + rope, "K": h}, pdl) if gemm_stem \
        else (None, False)
    # the same kernel serves both slots: this path's own slot's winner first, else the other's; a config from a
    # smaller bucket that does not hold this M (a 16-row tile at M = 64) passes to the next
    slot, other = ("mla_norms_gemm", "rmsnorm_gemm") if kv_fused else ("rmsnorm_gemm", "mla_norms_gemm")
    qn_shape = {"M": m, "N": qn, "K": ql, "eps": EPS, **({"KV": kvl} if kv_fused else {})}
    refused = []
    for qn_name in (slot, other):
        if not configs.get(qn_name) and qn_name != "rmsnorm_gemm":  # no winners: rmsnorm_gemm's default config
            continue
        qn_stem, qn_cfg = pick(configs, qn_name, m, "rmsnorm_gemm_fused")
        try:
            q_norm_gemm, qn_chained = make(qn_stem, qn_cfg, qn_shape, pdl)
            break
        except ValueError as e:
            refused.append(f"{qn_name}: {e}")
    else:
        raise SystemExit(f"no tuned config of {slot} or its kernel's other slot holds M={m}: {'; '.join(refused)}")
    used = {"add_rmsnorm": [add_stem, add_cfg], "fused_qkv_a": [gemm_stem or "cuBLAS (stock kept)", gemm_cfg],
            slot: [qn_stem, qn_cfg] + ([] if qn_name == slot and configs.get(slot) else
                                       [f"config of the {qn_name} winner" if configs.get(qn_name) else "default config"])}
    if pdl:
        used["chained"] = {"pdl": pdl, "add_rmsnorm": add_chained, "fused_qkv_a": gemm_chained, slot: qn_chained}
    return add, qkv_a, q_norm_gemm, used


def build_paths(m, dims, data, configs, dev):
    h, ql, kvl, rope, qn = dims
    kernels = {"tuned": build_kernels(m, dims, configs), "tuned_kv_apart": build_kernels(m, dims, configs, kv_fused=False)}
    if device_chains(dev):
        kernels["tuned_pdl"] = build_kernels(m, dims, configs, pdl=1)
        kernels["tuned_kv_apart_pdl"] = build_kernels(m, dims, configs, pdl=1, kv_fused=False)
    used = {name: k[3] for name, k in kernels.items()}

    def stock():
        for d in data:
            o = d["stock"]
            r = d["x"].float() + d["residual"].float()
            o["residual_out"].copy_(r)
            o["normed"].copy_(native_norm(r, d["w_in"]))
            torch.matmul(o["normed"], d["w_qkv_a"].t(), out=o["qkv"])
            torch.matmul(native_norm(o["qkv"][:, :ql].float(), d["w_qa"]), d["w_qb"].t(), out=o["q"])
            o["kv"].copy_(native_norm(o["qkv"][:, ql:ql + kvl].float(), d["w_kva"]))

    def stock_fused_norm():
        for d in data:
            o = d["fn"]
            torch.add(d["x"], d["residual"], out=o["residual_out"])
            o["normed"].copy_(torch.nn.functional.rms_norm(o["residual_out"], (h,), d["w_in"], EPS))
            torch.matmul(o["normed"], d["w_qkv_a"].t(), out=o["qkv"])
            torch.matmul(torch.nn.functional.rms_norm(o["qkv"][:, :ql], (ql,), d["w_qa"], EPS), d["w_qb"].t(), out=o["q"])
            o["kv"].copy_(torch.nn.functional.rms_norm(o["qkv"][:, ql:ql + kvl], (kvl,), d["w_kva"], EPS))

    def tuned_path(name):
        add, qkv_a, q_norm_gemm, _ = kernels[name]
        kv_fused = "kv_apart" not in name

        def tuned():
            for d in data:
                o = d[name]
                add(d["x"], d["residual"], d["w_in"], o["normed"], o["residual_out"])
                if qkv_a is None:
                    torch.matmul(o["normed"], d["w_qkv_a"].t(), out=o["qkv"])
                else:
                    qkv_a(o["normed"], d["w_qkv_a"], o["qkv"])
                if kv_fused:  # strided views: columns of qkv
                    q_norm_gemm(o["qkv"][:, :ql], d["w_qa"], d["w_qb"], o["qkv"][:, ql:ql + kvl], d["w_kva"], o["q"],
                                o["kv"])
                else:
                    q_norm_gemm(o["qkv"][:, :ql], d["w_qa"], d["w_qb"], o["q"])
                    o["kv"].copy_(torch.nn.functional.rms_norm(o["qkv"][:, ql:ql + kvl], (kvl,), d["w_kva"], EPS))
        return tuned

    return {"stock": stock, "stock_fused_norm": stock_fused_norm, **{n: tuned_path(n) for n in kernels}}, used


def rel_l2(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--winners", default=None, help="a bench/service_tuning.py results JSON: the tuned kernels' configs")
    ap.add_argument("--configs", default=None, help="a JSON of the same form as configs_from_tuning's (CPU tests)")
    ap.add_argument("--batches", default="1,4,16")
    ap.add_argument("--sets", type=int, default=4, help="weight copies per graph (4 x 35 MB > the 60 MB L2)")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--dims", default=",".join(map(str, K2_TP8)), help="hidden,q_lora_rank,kv_lora_rank,rope,q_b N")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("attn_block.py: no CUDA device here (use --device cpu with TRITON_INTERPRET=1)")
    dims = tuple(int(v) for v in args.dims.split(","))
    configs = json.loads(pathlib.Path(args.configs).read_text()) if args.configs else {}
    if args.winners:
        configs = {**configs_from_tuning(args.winners), **configs}
    rows = []
    for m in (int(b) for b in args.batches.split(",")):
        data = make_sets(m, dims, args.sets, dev)
        paths, used = build_paths(m, dims, data, configs, dev)
        runs = {name: capture(fn, dev) for name, fn in paths.items()}
        times = time_pair(runs, args.reps, dev)
        row = {"M": m, "sets": args.sets, "tuned_kernels": used.pop("tuned"), **{f"{n}_kernels": u for n, u in used.items()},
               **measure_per_call(runs, times, dev, args.sets)}
        outs = ["fn", *(p for p in runs if p.startswith("tuned"))]
        row["rel_l2_vs_stock"] = {p: {o: max(rel_l2(d[p][o], d["stock"][o]) for d in data)
                                      for o in ("residual_out", "q", "kv")} for p in outs}
        for base in ("stock", "stock_fused_norm"):
            row[f"speedup_tuned_vs_{base}"] = row[base]["median_us"] / row["tuned"]["median_us"]
        for chained in (p for p in runs if p.endswith("_pdl")):  # side by side with the unchained path
            plain = chained.removesuffix("_pdl")
            row[f"speedup_{chained}_vs_{plain}"] = row[plain]["median_us"] / row[chained]["median_us"]
            row[f"speedup_{chained}_vs_stock"] = row["stock"]["median_us"] / row[chained]["median_us"]
        for fused in ("tuned", "tuned_pdl"):  # what normalising the kv latent inside q_b_proj's launch buys
            if fused in runs:
                apart = fused.replace("tuned", "tuned_kv_apart")
                row[f"speedup_{fused}_vs_{apart}"] = row[apart]["median_us"] / row[fused]["median_us"]
        rows.append(row)
        print(f"M={m:3d}  " + "  ".join(f"{p} {row[p]['median_us']:7.2f} us ({row[p]['kernels_per_call']} k)"
                                       for p in runs)
              + f"  tuned x{row['speedup_tuned_vs_stock']:.2f} vs stock, x{row['speedup_tuned_vs_stock_fused_norm']:.2f}"
              f" vs one-op norms  relL2 q " + " ".join(f"{p} {row['rel_l2_vs_stock'][p]['q']:.2e}" for p in outs[1:]),
              flush=True)
    h, ql, kvl, rope, qn = dims
    write_result(args.out, "attn_block", dev, {
        "dims": {"hidden": h, "q_lora_rank": ql, "kv_lora_rank": kvl, "rope": rope, "q_b_n": qn, "eps": EPS},
        "winners": args.winners, "rows": rows})


if __name__ == "__main__":
    main()
