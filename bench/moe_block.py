"""MoE block of one decode layer (Kimi-K2-like, TP8) on one GPU: stock torch vs the Triton slot kernels.

    add_rmsnorm -> router -> routed experts (+ shared expert, optionally on a side stream) -> sum

Each path is captured as ONE CUDA graph per batch size and timed by graph replay (median of many
replays, stock and tuned interleaved); kernel launches per graph are counted with torch.profiler on
one replay; the tuned output is checked against the stock output (rel-L2, and the fraction of
tokens whose top-k set matches). Writes $OUT/moe_block.json (or ./moe_block.json).

Paths, timed side by side in one run:
- ``stock``: routed experts by vLLM's ``fused_experts`` (Triton fused_moe) when vllm is importable;
  otherwise torch's per-expert loop (host sync: cannot be graph-captured), timed eagerly and marked so;
- ``stock_graph``: the same torch block with the routed experts as one gather + two bmm (no host sync,
  no per-expert launches: kernels/variants/torch/moe_experts_gather_bmm.py), captured as one graph - the
  fair torch baseline when vLLM is not installed;
- ``tuned``: the Triton slot kernels, the shared expert after the routed experts on one stream;
- ``tuned_side``: the same, the shared expert on its own stream beside router + routed experts (forked
  and joined inside the graph): the pair is timed, not each kernel alone.

    python bench/moe_block.py [--configs tuned.json | --winners results.json] [--batches 1,2,4,8,16,32,64]
    TRITON_INTERPRET=1 python bench/moe_block.py --device cpu --spec tiny --batches 1,3   # functional, CPU

tuned.json: {"router": {...}, "moe_experts": {"1": {...}, "16": {...}}, ...}: a slot maps to one config
or to configs keyed by batch (the largest key <= M is used, else the smallest).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import pathlib
import statistics
import sys
import time

try:
    import torch
    import triton  # noqa: F401
except ImportError as exc:  # pragma: no cover
    sys.exit(f"moe_block.py needs torch and triton on a CUDA machine: {exc}")

ROOT = pathlib.Path(__file__).resolve().parents[1]
VARIANTS = ROOT / "kernels" / "variants"
sys.path.insert(0, str(ROOT / "bench"))
from results_files import tuned_winners  # noqa: E402
sys.path.insert(0, str(ROOT))
from search import landscape  # noqa: E402
from workers.chain import device_chains, takes_pdl  # noqa: E402
SPECS = {
    "k2-tp8": dict(H=7168, E=384, top_k=8, n_group=1, topk_group=1, I=2048 // 8, I_shared=2048 // 8, eps=1e-6,
                   scaling=2.827, scoring="sigmoid", norm=True),
    # small enough for Triton's interpreter on a CPU (tests/test_moe_block.py), same structure
    "tiny": dict(H=512, E=32, top_k=4, n_group=1, topk_group=1, I=64, I_shared=64, eps=1e-6,
                 scaling=2.5, scoring="sigmoid", norm=True),
}
MODULES = {"add_rmsnorm": "add_rmsnorm_fused", "router": "router_fused", "moe_experts": "moe_experts_grouped",
           "shared_expert": "shared_expert_fused"}
# The routed and shared experts in one pass (kernels/slots/moe_experts_shared.py): the tuned_shared_fused paths,
# built where the configs have this slot's winners and the shared expert is one more expert's shape.
SHARED_SLOT = "moe_experts_shared"
SHARED_ROUTER = "router_fused"  # the router file that writes the shared experts' columns (its shape's "shared")
BLOCK_FILES = {**MODULES, SHARED_SLOT: "moe_experts_grouped"}
# A bucket's winner may be another Triton file of the same slot than MODULES names (the table picks per
# bucket, e.g. shared_expert_gemv at M <= 2); a block config names such a file under FILE_KEY.
FILE_KEY = "file"


def load(name, language="triton"):
    spec = importlib.util.spec_from_file_location(f"_bench_{language}_{name}", VARIANTS / language / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def configs_from_tuning(path):
    """The configs of a bench/service_tuning.py results file's winners for this block's slots, keyed by
    the M that won each bucket; only winners that are shipped Triton files count (a stock or torch/CuTe
    bucket keeps the nearest tuned config: the tuned path has no stock fallback)."""
    out = {}
    for key, by_m in tuned_winners(path, lambda k: k.split("/")[0] in BLOCK_FILES).items():
        slot = key.split("/")[0]
        for m, (stem, config) in by_m.items():
            if stem == BLOCK_FILES[slot]:
                out.setdefault(slot, {})[str(m)] = config
            elif (VARIANTS / "triton" / f"{stem}.py").is_file():
                out.setdefault(slot, {})[str(m)] = {FILE_KEY: stem, **config}
    return out


def pick(configs, slot, m):
    c = configs.get(slot, {})
    if c and all(str(k).isdigit() for k in c):
        keys = sorted(int(k) for k in c)
        below = [k for k in keys if k <= m]
        return c[str(below[-1] if below else keys[0])]
    return c


def shared_is_an_expert(s):
    """Whether the shared expert has a routed expert's shape, so that it can be the experts' (E+1)-th."""
    return s["I_shared"] == s["I"]


def make_weights(s, dev, gen):
    """Where the shared expert has a routed expert's shape, it is stored as expert E of w13_all / w2_all, and w13,
    w2, sw13 and sw2 are views of those: the same bytes for every path, one copy."""
    bf = torch.bfloat16

    def w(*shape, fan_in):
        return (torch.randn(shape, generator=gen, device=dev) / fan_in ** 0.5).to(bf)
    out = {"norm_w": (0.5 + torch.rand(s["H"], generator=gen, device=dev)).to(bf),
           "gate": w(s["E"], s["H"], fan_in=s["H"]),
           "bias": torch.randn(s["E"], generator=gen, device=dev) * 0.02}
    if shared_is_an_expert(s):
        w13_all, w2_all = w(s["E"] + 1, 2 * s["I"], s["H"], fan_in=s["H"]), w(s["E"] + 1, s["H"], s["I"], fan_in=s["I"])
        return {**out, "w13_all": w13_all, "w2_all": w2_all, "w13": w13_all[:s["E"]], "w2": w2_all[:s["E"]],
                "sw13": w13_all[s["E"]], "sw2": w2_all[s["E"]]}
    return {**out, "w13": w(s["E"], 2 * s["I"], s["H"], fan_in=s["H"]), "w2": w(s["E"], s["H"], s["I"], fan_in=s["I"]),
            "sw13": w(2 * s["I_shared"], s["H"], fan_in=s["H"]), "sw2": w(s["H"], s["I_shared"], fan_in=s["I_shared"])}


def stock_router(s, h, W):
    scores = torch.sigmoid(torch.matmul(h, W["gate"].t()).float())
    ids = (scores + W["bias"]).topk(s["top_k"], dim=-1).indices
    wts = scores.gather(1, ids)
    wts = wts / wts.sum(-1, keepdim=True) * s["scaling"]
    return ids.to(torch.int32), wts


def stock_mlp(x, w13, w2):
    g, u = torch.matmul(x, w13.t()).chunk(2, dim=-1)
    return torch.matmul(torch.nn.functional.silu(g) * u, w2.t())


def fp32_router_ids(s, h, W):
    """The referee where routers disagree: the top-k of fp32 logits of the same normed tokens."""
    return stock_router(s, h.float(), {**W, "gate": W["gate"].float()})[0]


def topk_match(a, b):
    """The fraction of tokens whose top-k expert sets agree."""
    return (a.long().sort(-1).values == b.long().sort(-1).values).all(-1).float().mean().item()


def stock_experts_fn():
    try:
        from vllm.model_executor.layers.fused_moe import fused_experts  # type: ignore

        def run(h, W, ids, wts):
            return fused_experts(h, W["w13"], W["w2"], wts, ids, inplace=False)
        return run, "vllm.fused_experts", True
    except Exception:
        def run(h, W, ids, wts):
            acc = torch.zeros(h.shape, device=h.device, dtype=torch.float32)
            il = ids.long()
            for e in il.unique().tolist():
                tok, j = (il == e).nonzero(as_tuple=True)
                acc.index_add_(0, tok, stock_mlp(h[tok], W["w13"][e], W["w2"][e]).float() * wts[tok, j, None])
            return acc.to(h.dtype)
        return run, "torch per-expert loop (eager, host sync)", False


def build_paths(s, m, W, configs, dev, after_norm=False):
    """The block's paths at batch m; ``after_norm`` adds ``tuned_side_after_norm``: tuned_side without its first
    kernel, for a caller whose o_proj kernel already wrote the normed tokens, and on sm_90+ ``tuned_chain_after_norm``:
    the same with the router and the routed experts built as links of a chain of programmatic dependent launches
    (their build's pdl=1, where it takes one), so the router's GEMV fetches its weights while the kernel ahead of it
    runs and w13 launches during the router's epilogue; it writes its own outputs (ids_chain, wts_chain,
    routed_chain, out_chain)."""
    chosen = {k: dict(pick(configs, k, m)) for k in MODULES}
    files = {k: chosen[k].pop(FILE_KEY, MODULES[k]) for k in MODULES}
    gather_bmm = load("moe_experts_gather_bmm", "torch").build({"intermediate": "bf16"}, dict(M=m, top_k=s["top_k"], I=s["I"]))
    shp = {"add_rmsnorm": dict(H=s["H"], eps=s["eps"]),
           "router": dict(E=s["E"], K=s["H"], top_k=s["top_k"], n_group=s["n_group"], topk_group=s["topk_group"],
                          scaling=s["scaling"], norm=s["norm"], scoring=s["scoring"]),
           "moe_experts": dict(E=s["E"], K=s["H"], I=s["I"], top_k=s["top_k"]),
           "shared_expert": dict(K=s["H"], I=s["I_shared"])}
    mods = {k: load(files[k]) for k in MODULES}
    fns = {k: mods[k].build(chosen[k], dict(shp[k], M=m, slot=k, name=k, dtype="bfloat16")) for k in MODULES}
    chain_fns, chained = dict(fns), {}
    if after_norm and device_chains(dev):
        for k in ("router", "moe_experts"):
            chained[k] = takes_pdl(mods[k])
            if chained[k]:
                chain_fns[k] = mods[k].build(chosen[k], dict(shp[k], M=m, slot=k, name=k, dtype="bfloat16"), pdl=1)
    bf = torch.bfloat16
    gen = torch.Generator(device=dev).manual_seed(1000 + m)  # the same tokens on every run of this script
    buf = {"x": torch.randn(m, s["H"], device=dev, generator=gen).to(bf),
           "res": torch.randn(m, s["H"], device=dev, generator=gen).to(bf),
           "h": torch.empty(m, s["H"], device=dev, dtype=bf), "res_out": torch.empty(m, s["H"], device=dev, dtype=bf),
           "ids": torch.empty(m, s["top_k"], device=dev, dtype=torch.int32),
           "wts": torch.empty(m, s["top_k"], device=dev, dtype=torch.float32),
           "routed": torch.empty(m, s["H"], device=dev, dtype=bf), "shared": torch.empty(m, s["H"], device=dev, dtype=bf),
           "out": torch.empty(m, s["H"], device=dev, dtype=bf), "stock_out": torch.empty(m, s["H"], device=dev, dtype=bf),
           "stock_ids": torch.empty(m, s["top_k"], device=dev, dtype=torch.int64)}
    # On a CPU there is no second stream: tuned_side runs as tuned does (the row says side_stream false).
    side_stream = torch.cuda.Stream() if dev.type == "cuda" else None
    experts, experts_name, capturable = stock_experts_fn()

    def tuned(side=None, out="out", norm=True, fns=fns, sfx=""):
        """sfx "": the block's own buffers; "_chain": the chained path's ids, weights, routed and out."""
        if norm:  # norm=False: the caller ran the add + RMSNorm inside o_proj's kernels (bench/decode_layer.py)
            fns["add_rmsnorm"](x=buf["x"], residual=buf["res"], weight=W["norm_w"], out=buf["h"],
                               residual_out=buf["res_out"])
        if side is not None:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fns["shared_expert"](x=buf["h"], w13=W["sw13"], w2=W["sw2"], out=buf["shared"])
        ids, wts, routed = buf["ids" + sfx], buf["wts" + sfx], buf["routed" + sfx]
        fns["router"](x=buf["h"], w=W["gate"], bias=W["bias"], topk_ids=ids, topk_weights=wts)
        fns["moe_experts"](x=buf["h"], w13=W["w13"], w2=W["w2"], topk_ids=ids, topk_weights=wts, out=routed)
        if side is None:
            fns["shared_expert"](x=buf["h"], w13=W["sw13"], w2=W["sw2"], out=buf["shared"])
        else:
            torch.cuda.current_stream().wait_stream(side)
        torch.add(routed, buf["shared"], out=buf[out])

    def stock(graph_experts=False):
        r = buf["x"] + buf["res"]
        rf = r.float()
        h = (rf * torch.rsqrt(rf.pow(2).mean(-1, keepdim=True) + s["eps"])).to(bf) * W["norm_w"]
        ids, wts = stock_router(s, h, W)
        if graph_experts:
            gather_bmm(h, W["w13"], W["w2"], ids, wts, buf["routed_g"])
            buf["stock_g_out"].copy_(buf["routed_g"] + stock_mlp(h, W["sw13"], W["sw2"]))
            return
        buf["stock_ids"].copy_(ids)
        routed = experts(h, W, ids, wts)
        buf["stock_out"].copy_(routed + stock_mlp(h, W["sw13"], W["sw2"]))

    buf["routed_g"] = torch.empty(m, s["H"], device=dev, dtype=bf)
    buf["stock_g_out"] = torch.empty(m, s["H"], device=dev, dtype=bf)
    buf["out_side"] = torch.empty(m, s["H"], device=dev, dtype=bf)
    paths = {"stock": stock, "stock_graph": lambda: stock(graph_experts=True), "tuned": tuned,
             "tuned_side": lambda: tuned(side=side_stream, out="out_side")}
    if after_norm:
        paths["tuned_side_after_norm"] = lambda: tuned(side=side_stream, out="out_side", norm=False)
    if chained:
        for name in ("ids", "wts", "routed", "out"):
            buf[name + "_chain"] = torch.empty_like(buf[name])
        paths["tuned_chain_after_norm"] = lambda: tuned(side=side_stream, out="out_chain", norm=False, fns=chain_fns,
                                                        sfx="_chain")
        files = {**files, "chained": chained}
    fused = shared_fused_paths(s, m, W, configs, dev, after_norm, files, mods, shp, chosen, fns, buf)
    if fused:
        paths.update(fused[0])
        files = {**files, "shared_fused": fused[1]}
    return paths, buf, files, experts_name, capturable


def shared_fused_paths(s, m, W, configs, dev, after_norm, files, mods, shp, chosen, fns, buf):
    """({path: fn}, what was used) of the block with the shared expert as the routed experts' (E+1)-th, picked by
    every token with weight 1 (kernels/slots/moe_experts_shared.py): the router writes that pick beside its top-k and
    one experts pass computes the block's output, with no shared-expert launches and no add. None where the configs
    have no moe_experts_shared winner, the shared expert is not one expert's shape, or the router winner's file does
    not write the shared column. Paths: tuned_shared_fused (from the norm), with after_norm also
    tuned_shared_fused_after_norm and, on sm_90+, tuned_shared_fused_chain_after_norm (router and experts chained
    by PDL as in tuned_chain_after_norm). Outputs: ids_sf / wts_sf / out_sf, and _sfc for the chain."""
    if SHARED_SLOT not in configs or "w13_all" not in W or files["router"] != SHARED_ROUTER:
        return None
    cfg = dict(pick(configs, SHARED_SLOT, m))
    stem = cfg.pop(FILE_KEY, BLOCK_FILES[SHARED_SLOT])
    mod = load(stem)
    shape = dict(E=s["E"] + 1, K=s["H"], I=s["I"], top_k=s["top_k"] + 1, shared=1, M=m, slot=SHARED_SLOT,
                 name=SHARED_SLOT, dtype="bfloat16")
    r_shape = dict(shp["router"], shared=1, M=m, slot="router", name="router", dtype="bfloat16")
    plain = {"router": mods["router"].build(chosen["router"], r_shape), "experts": mod.build(cfg, shape)}
    sets = {"_sf": plain}
    chained = after_norm and device_chains(dev) and takes_pdl(mods["router"]) and takes_pdl(mod)
    if chained:
        sets["_sfc"] = {"router": mods["router"].build(chosen["router"], r_shape, pdl=1),
                        "experts": mod.build(cfg, shape, pdl=1)}
    for sfx in sets:
        buf["ids" + sfx] = torch.empty(m, s["top_k"] + 1, device=dev, dtype=torch.int32)
        buf["wts" + sfx] = torch.empty(m, s["top_k"] + 1, device=dev, dtype=torch.float32)
        buf["out" + sfx] = torch.empty(m, s["H"], device=dev, dtype=torch.bfloat16)

    def run(norm=True, sfx="_sf"):
        if norm:
            fns["add_rmsnorm"](x=buf["x"], residual=buf["res"], weight=W["norm_w"], out=buf["h"],
                               residual_out=buf["res_out"])
        k = sets[sfx]
        k["router"](x=buf["h"], w=W["gate"], bias=W["bias"], topk_ids=buf["ids" + sfx], topk_weights=buf["wts" + sfx])
        k["experts"](x=buf["h"], w13=W["w13_all"], w2=W["w2_all"], topk_ids=buf["ids" + sfx],
                     topk_weights=buf["wts" + sfx], out=buf["out" + sfx])

    paths = {"tuned_shared_fused": run}
    if after_norm:
        paths["tuned_shared_fused_after_norm"] = lambda: run(norm=False)
    if chained:
        paths["tuned_shared_fused_chain_after_norm"] = lambda: run(norm=False, sfx="_sfc")
    return paths, {"file": stem, "config": cfg, "chained": chained}


def capture(fn, dev):
    if dev.type != "cuda":  # no graphs on a CPU: warm up, then call it as it is
        fn()
        return fn
    st = torch.cuda.Stream()
    st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st):
        for _ in range(3):  # warm-up: compiles, allocates workspaces
            fn()
    torch.cuda.current_stream().wait_stream(st)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def count_kernels(run, dev):
    if dev.type != "cuda":
        return None, None
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    evs = [e for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA")]
    names = [e.name for e in evs]
    return sum(1 for n in names if not n.lower().startswith(("memcpy", "memset"))), len(names)


def kernel_breakdown(run, dev):
    """GPU time per kernel name over one call of ``run`` (torch.profiler's CUDA activity: the kernels inside a
    replayed graph too), in us, largest first: where a path's time goes, e.g. the MoE's align / w13 / w2.
    None on a CPU; an {"error": ...} instead of failing the benchmark where the profiler gives no times."""
    if dev.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile
    try:
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
        per: dict[str, float] = {}
        for e in prof.events():
            if str(getattr(e, "device_type", "")).endswith("CUDA"):
                per[e.name] = per.get(e.name, 0.0) + (e.time_range.end - e.time_range.start)
        return dict(sorted(per.items(), key=lambda kv: -kv[1]))
    except Exception as exc:  # noqa: BLE001 - a breakdown is an extra; the timings stand without it
        return {"error": f"{type(exc).__name__}: {exc}"}


def time_pair(runs, reps, dev):
    if dev.type != "cuda":
        samples = {k: [] for k in runs}
        for _ in range(reps):  # interleaved
            for k, run in runs.items():
                t0 = time.perf_counter()
                run()
                samples[k].append((time.perf_counter() - t0) * 1e6)
        return {k: summarise(t) for k, t in samples.items()}
    starts = {k: [torch.cuda.Event(enable_timing=True) for _ in range(reps)] for k in runs}
    ends = {k: [torch.cuda.Event(enable_timing=True) for _ in range(reps)] for k in runs}
    for i in range(reps):  # interleaved
        for k, run in runs.items():
            starts[k][i].record()
            run()
            ends[k][i].record()
    torch.cuda.synchronize()
    return {k: summarise([a.elapsed_time(b) * 1e3 for a, b in zip(starts[k], ends[k])]) for k in runs}


def summarise(samples):
    t = sorted(samples)
    return {"median_us": statistics.median(t), "p10_us": t[len(t) // 10], "p90_us": t[(9 * len(t)) // 10]}


def measure_per_call(runs, times, dev, sets):
    """Per path, per call of a graph that runs it over ``sets`` rotating weight copies: the timings, the
    kernel launches and the GPU time per kernel name."""
    rows = {}
    for name, run in runs.items():
        kernels, _ = count_kernels(run, dev)
        per = kernel_breakdown(run, dev)
        rows[name] = {**{key: v / sets for key, v in times[name].items()},
                      "kernels_per_call": None if kernels is None else kernels / sets,
                      "kernel_us_per_call": {k: v / sets for k, v in per.items()} if per and "error" not in per
                      else per}
    return rows


def write_result(out, name, dev, fields):
    """Write $OUT/<name>.json: date, commit, command and device, then the benchmark's own fields."""
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "commit": landscape.git_commit(ROOT),
              "command": " ".join(sys.argv), "device": device_info(dev), **fields}
    out_dir = pathlib.Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.json").write_text(json.dumps(result, indent=1))
    print(f"wrote {out_dir / f'{name}.json'}")


def device_info(dev):
    if dev.type != "cuda":
        return {"name": "cpu", "torch": torch.__version__, "triton": triton.__version__,
                "triton_interpret": os.environ.get("TRITON_INTERPRET") == "1"}
    p = torch.cuda.get_device_properties(dev)
    return {"name": p.name, "sm": f"{p.major}.{p.minor}", "sms": p.multi_processor_count,
            "torch": torch.__version__, "triton": triton.__version__}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default=None)
    ap.add_argument("--winners", default=None, help="a bench/service_tuning.py results JSON: its winners' configs")
    ap.add_argument("--batches", default="1,2,4,8,16,32,64")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--spec", choices=sorted(SPECS), default="k2-tp8")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu (with TRITON_INTERPRET=1: a functional run, "
                                                     "no graphs, no second stream, no kernel counts)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("moe_block.py: no CUDA device here (use --device cpu --spec tiny with TRITON_INTERPRET=1)")
    spec = SPECS[args.spec]
    configs = json.load(open(args.configs)) if args.configs else {}
    if args.winners:
        configs = {**configs_from_tuning(args.winners), **configs}
    W = make_weights(spec, dev, torch.Generator(device=dev).manual_seed(0))
    rows = []
    for m in [int(b) for b in args.batches.split(",")]:
        paths, buf, files, experts_name, capturable = build_paths(spec, m, W, configs, dev)
        runs = {name: (capture(fn, dev) if capturable or name != "stock" else fn) for name, fn in paths.items()}
        if not capturable:
            paths["stock"]()
        for run in runs.values():
            run()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        ref = buf["stock_out"].float()

        def rel(name):
            return ((buf[name].float() - ref).norm() / ref.norm()).item()

        same = topk_match(buf["ids"], buf["stock_ids"])
        # Who is right where the two disagree: the top-k of fp32 logits of the same normed tokens. The stock
        # router rounds its logits to bf16 before the sigmoid (torch.matmul's output dtype); the tuned one
        # keeps fp32, so near-ties between the k-th and (k+1)-th expert can fall either way.
        ref_ids = fp32_router_ids(spec, buf["h"], W)
        times = time_pair(runs, args.reps, dev)
        row = {"M": m, "topk_set_match": same, "side_stream": dev.type == "cuda", "files": files,
               "topk_set_match_vs_fp32_logits": {"tuned": topk_match(buf["ids"], ref_ids),
                                                 "stock": topk_match(buf["stock_ids"], ref_ids)}}
        for name, run in runs.items():
            k, k_all = count_kernels(run, dev)
            row[name] = {**times[name], "kernels": k, "events": k_all,
                         "graph": dev.type == "cuda" and (name != "stock" or capturable),
                         "kernel_us": kernel_breakdown(run, dev) if name != "stock" else None}
        row["stock"]["routed_experts"] = experts_name
        row["stock_graph"]["routed_experts"] = "torch gather + bmm (graph)"
        row["rel_l2_vs_stock"] = {"tuned": rel("out"), "tuned_side": rel("out_side"), "stock_graph": rel("stock_g_out"),
                                  **({"tuned_shared_fused": rel("out_sf")} if "out_sf" in buf else {})}
        if "ids_sf" in buf:  # the same routing as tuned's, and the shared expert's column
            row["shared_fused_ids_match_tuned"] = bool(torch.equal(buf["ids_sf"][:, :-1], buf["ids"]))
        for base in ("stock", "stock_graph"):
            for name in (n for n in ("tuned", "tuned_side", "tuned_shared_fused") if n in runs):
                row[f"speedup_{name}_vs_{base}"] = times[base]["median_us"] / times[name]["median_us"]
        # The pair on two streams against one stream: what overlapping the shared expert buys.
        row["side_stream_gain"] = times["tuned"]["median_us"] / times["tuned_side"]["median_us"]
        rows.append(row)
        print(f"M={m:3d}  " + "  ".join(f"{n} {row[n]['median_us']:8.1f} us ({row[n]['kernels']} k)" for n in runs)
              + f"  side-stream x{row['side_stream_gain']:.2f}  relL2 {row['rel_l2_vs_stock']['tuned']:.2e}"
              f"  topk-match {same:.3f} (vs fp32 logits: tuned {row['topk_set_match_vs_fp32_logits']['tuned']:.3f}, "
              f"stock {row['topk_set_match_vs_fp32_logits']['stock']:.3f})", flush=True)
    write_result(args.out, "moe_block", dev, {"spec_name": args.spec, "spec": spec, "configs": configs, "rows": rows})


if __name__ == "__main__":
    main()
