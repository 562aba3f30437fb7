"""GPU smoke test of the triton and cute dense_gemm variants on the Kimi-K2-like TP8 shapes.

For each variant x shape x M x config: build, check against an fp32 reference (NaN-poisoned
output, rel-L2 <= 1e-2, inputs unchanged), then time variant and torch.matmul by CUDA-graph replay
over rotating weight copies (>= 2x the 50 MB L2), interleaved. Also: eager host overhead per
call, and the kerneltune backends' GPU path with the compile cache (in-process and across
processes). Prints a table; writes JSON to $OUT/gpu_smoke.json when OUT is set.

    python3 bench/gpu_smoke.py [--quick] [--variants triton,cute] [--no-backends]

Needs only torch + triton + nvidia-cutlass-dsl (and the repo for the backend section).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {
    "triton_splitk": ROOT / "kernels/variants/triton/dense_gemm_splitk.py",
    "cute_warp_gemv": ROOT / "kernels/variants/cute/dense_gemm_warp_gemv.py",
}
SHAPES = {"fused_qkv_a": (2112, 7168), "q_b_proj": (1536, 1536), "o_proj": (7168, 1024), "lm_head": (20480, 7168)}
MS = (1, 2, 4, 8, 16, 32, 64)
HBM_TB_S = 4.22  # measured copy bandwidth on the H200 (baselines/h200_torch_small_m.json)
L2_BYTES = 50 * 2**20


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def pow2_at_least(v: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(v, 1))))


def triton_configs(m: int, n: int, k: int) -> list[dict]:
    bm = max(16, pow2_at_least(m))
    out = []
    for bn, bk, warps, stages in ((64, 256, 4, 3), (32, 512, 4, 4 if bm <= 16 else 2)):
        ctas = math.ceil(n / bn)
        split = 1
        while ctas * split < 2 * 132 and bk * split * 2 <= k:  # >= 2 CTAs per SM
            split *= 2
        out.append({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": warps,
                    "num_stages": stages})
    return out


def cute_configs(m: int, n: int, k: int) -> list[dict]:
    return [{"ROWS_PER_WARP": 2 if m <= 32 else 1, "WARPS_PER_CTA": 4, "UNROLL": 4},
            {"ROWS_PER_WARP": 4 if m <= 16 else 1, "WARPS_PER_CTA": 8, "UNROLL": 2}]


CONFIGS = {"triton_splitk": triton_configs, "cute_warp_gemv": cute_configs}


def graph_us(call: Callable[[int], None], copies: int, reps: int) -> Callable[[], float]:
    """Capture `reps` back-to-back calls rotating over `copies` weight sets; return a timer."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(min(copies, 3)):
            call(i)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(reps):
            call(i % copies)
    g.replay()
    torch.cuda.synchronize()

    def timer() -> float:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) * 1e3 / reps

    return timer


def eager_us(fn: Callable[[], None], n: int = 200) -> float:
    """Host cost per call: back-to-back eager launches; the GPU work is tiny, so the host bounds it."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def run_case(mod, vname: str, sname: str, n: int, k: int, m: int, config: dict, ws: list[torch.Tensor]) -> dict:
    row: dict[str, Any] = {"variant": vname, "shape": sname, "N": n, "K": k, "M": m, "config": config}
    shape = {"N": n, "K": k, "M": m, "slot": "dense_gemm", "name": sname, "dtype": "bfloat16"}
    try:
        t0 = time.perf_counter()
        fn = mod.build(dict(config), shape)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        fn(x=x, w=ws[0], out=out)  # first call compiles (triton) and checks
        torch.cuda.synchronize()
        row["build_s"] = round(time.perf_counter() - t0, 3)
        x0, w0 = x.clone(), ws[0].clone()
        ref = x.float() @ ws[0].float().t()
        rel = ((out.float() - ref).norm() / ref.norm()).item()
        row["rel_l2"] = rel
        row["ok"] = bool(torch.isfinite(out).all()) and rel <= 1e-2 and torch.equal(x, x0) and torch.equal(ws[0], w0)
        # second trial on new inputs must change the answer (nothing cached)
        x2 = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        out.fill_(float("nan"))
        fn(x=x2, w=ws[-1], out=out)
        ref2 = x2.float() @ ws[-1].float().t()
        rel2 = ((out.float() - ref2).norm() / ref2.norm()).item()
        row["ok"] = row["ok"] and rel2 <= 1e-2
        if not row["ok"]:
            return row
        outs = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
        reps = max(len(ws), 16)
        tv = graph_us(lambda i: fn(x=x, w=ws[i], out=outs), len(ws), reps)
        tt = graph_us(lambda i: torch.matmul(x, ws[i].t(), out=outs), len(ws), reps)
        vs, ts = [], []
        for _ in range(7):  # interleaved so clock / thermal drift hits both alike
            vs.append(tv())
            ts.append(tt())
        row["us"] = round(statistics.median(vs), 2)
        row["torch_us"] = round(statistics.median(ts), 2)
        row["speedup"] = round(row["torch_us"] / row["us"], 3)
        floor_us = (n * k + m * k + m * n) * 2 / (HBM_TB_S * 1e12) * 1e6
        row["hbm_frac"] = round(floor_us / row["us"], 3)
        row["torch_hbm_frac"] = round(floor_us / row["torch_us"], 3)
        row["eager_us"] = round(eager_us(lambda: fn(x=x, w=ws[0], out=outs)), 1)
    except Exception as exc:
        row["ok"] = False
        row["error"] = f"{type(exc).__name__}: {str(exc)[:800]}"
        row["trace"] = traceback.format_exc()[-2000:]
    return row


CUTE_CACHE_CHILD = """
import os, sys, time
sys.path.insert(0, {root!r})
from kernels.backends import compile_cache
compile_cache.configure_language_caches()
import importlib.util, torch
spec = importlib.util.spec_from_file_location("v", {path!r}); mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
t = time.perf_counter()
mod.build({{"ROWS_PER_WARP": 2, "WARPS_PER_CTA": 4, "UNROLL": 4}}, {{"N": 2112, "K": 7168, "M": 4, "slot": "dense_gemm", "name": "fused_qkv_a", "dtype": "bfloat16"}})
print("BUILD_S", time.perf_counter() - t)
"""


def backend_section() -> dict:
    """The kerneltune backends' CUDA path: eager compile, PTX claims, cache hit on a second build, and
    whether CuTe DSL's file cache (CUTE_DSL_CACHE_DIR) saves compile time in a fresh process."""
    res: dict[str, Any] = {}
    cache = tempfile.mkdtemp(prefix="kt_cache_")
    os.environ["KT_COMPILE_CACHE"] = cache
    sys.path.insert(0, str(ROOT))
    try:
        from kernels.backends.base import load_module
        from kernels.backends.cute_backend import CuteBackend
        from kernels.backends.triton_backend import TritonBackend

        shape = {"N": 1536, "K": 1536, "M": 4, "slot": "dense_gemm", "name": "q_b_proj", "dtype": "bfloat16"}
        cases = (("triton", TritonBackend(), VARIANTS["triton_splitk"], triton_configs(4, 1536, 1536)[0]),
                 ("cute", CuteBackend(), VARIANTS["cute_warp_gemv"], cute_configs(4, 1536, 1536)[0]))
        for lang, backend, path, config in cases:
            try:
                mod = load_module(path.read_text(), f"kt_smoke_{lang}", os.path.join(cache, f"{lang}_variant.py"))
                b1 = backend.build(mod, config, shape, torch.device("cuda"))
                b2 = backend.build(mod, config, shape, torch.device("cuda"))
                res[lang] = {"first_s": round(b1.compile_seconds, 3), "second_s": round(b2.compile_seconds, 3),
                             "first_hit": b1.cache_hit, "second_hit": b2.cache_hit, "ptx_chars": len(b1.ptx or "")}
            except Exception as exc:
                res[lang] = {"error": f"{type(exc).__name__}: {str(exc)[:800]}", "trace": traceback.format_exc()[-2000:]}
        times = []
        for _ in range(2):
            child = CUTE_CACHE_CHILD.format(root=str(ROOT), path=str(VARIANTS["cute_warp_gemv"]))
            p = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300,
                               env={**os.environ, "KT_COMPILE_CACHE": cache})
            got = [ln.split()[1] for ln in p.stdout.splitlines() if ln.startswith("BUILD_S")]
            times.append(float(got[0]) if got else (p.stderr or p.stdout)[-800:])
        res["cute_file_cache_build_s_fresh_processes"] = times
        res["cute_cache_files"] = sum(1 for _ in Path(cache, "cute").rglob("*"))
    except Exception as exc:
        res["error"] = f"{type(exc).__name__}: {exc}"
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--ms", default=",".join(map(str, MS)))
    ap.add_argument("--quick", action="store_true", help="first config only")
    ap.add_argument("--no-backends", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.cuda.get_device_properties(0)
    import triton

    info = {"device": dev.name, "sms": dev.multi_processor_count, "torch": torch.__version__, "triton": triton.__version__}
    try:
        from importlib.metadata import version
        info["cutlass_dsl"] = version("nvidia-cutlass-dsl")
    except Exception as exc:
        info["cutlass_dsl"] = f"? {exc}"
    print(json.dumps(info))
    rows: list[dict] = []
    mods = {}
    for v in args.variants.split(","):
        try:
            mods[v] = load(VARIANTS[v], f"smoke_{v}")
        except Exception as exc:
            rows.append({"variant": v, "ok": False, "error": f"import: {type(exc).__name__}: {exc}"})
            print(f"{v}: import failed: {exc}")
    ms = [int(x) for x in args.ms.split(",")]
    print(f"{'variant':15s} {'shape':11s} {'M':>3s} {'config':44s} {'ok':3s} {'rel':>8s} {'us':>8s} {'torch':>8s} "
          f"{'x':>6s} {'%HBM':>5s} {'eager':>6s}")
    for sname in args.shapes.split(","):
        n, k = SHAPES[sname]
        copies = max(2, math.ceil(2.5 * L2_BYTES / (n * k * 2)))
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / math.sqrt(k) for _ in range(copies)]
        for v, mod in mods.items():
            for m in ms:
                cfgs = CONFIGS[v](m, n, k)[: 1 if args.quick else None]
                for cfg in cfgs:
                    r = run_case(mod, v, sname, n, k, m, cfg, ws)
                    rows.append(r)
                    c = ",".join(f"{kk}={vv}" for kk, vv in cfg.items())
                    c = c.replace("BLOCK_", "").replace("num_", "").replace("ROWS_PER_WARP", "R").replace("WARPS_PER_CTA", "W")
                    print(f"{v:15s} {sname:11s} {m:3d} {c[:44]:44s} {'ok' if r.get('ok') else 'BAD':3s} "
                          f"{r.get('rel_l2', float('nan')):8.1e} {r.get('us', float('nan')):8.2f} "
                          f"{r.get('torch_us', float('nan')):8.2f} {r.get('speedup', float('nan')):6.2f} "
                          f"{100 * r.get('hbm_frac', float('nan')):5.1f} {r.get('eager_us', float('nan')):6.1f}"
                          + (f"  {r['error'][:200]}" if "error" in r else ""), flush=True)
        del ws
        torch.cuda.empty_cache()
    result = {"info": info, "rows": rows}
    if not args.no_backends:
        result["backends"] = backend_section()
        print("backends:", json.dumps(result["backends"], default=str)[:3000])
    bad = [r for r in rows if not r.get("ok")]
    print(f"{len(rows) - len(bad)}/{len(rows)} cases ok")
    if os.environ.get("OUT"):
        os.makedirs(os.environ["OUT"], exist_ok=True)
        with open(os.path.join(os.environ["OUT"], "gpu_smoke.json"), "w") as f:
            json.dump(result, f, indent=1, default=str)


if __name__ == "__main__":
    main()
