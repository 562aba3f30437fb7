"""TP collective fusions on a multi-GPU host: fused vs stock in the same process group, TP2/TP4/TP8.

For each world size the host allows (2, 4, 8 <= GPUs), each TP slot on the Kimi-K2-like shapes at
TP = world size (o_proj K = 64/tp*128, router 384 experts top-8; DeepSeek-V3's grouped router with
--specs), each shipped TP variant and config, each M: one ``workers.tp_group.evaluate_tp`` group
(NCCL, rank r on cuda:r): stock-form check, variant check against the single-device reference,
cross-rank bitwise agreement, then variant and TP stock timed interleaved by CUDA-graph replay
(the router also against the replicated gate, vLLM today). Then, unless --no-prefetch, the L2
prefetch experiment: o_proj partial -> all-reduce -> add+RMSNorm -> router gate GEMM, with and
without prefetching the gate weights into L2 during the all-reduce (kernels/tp/prefetch.py).

    OUT=/path python3 bench/tp_collectives.py [--worlds 2,4,8] [--batches 1,8,32,64] [--quick]

Writes $OUT/tp_collectives.json (date, device, GPU count, topology, commit, command, every result).
NVLink multicast stays off in every process. On a host with fewer than 2 GPUs it exits (status 2)
with a message and writes nothing.
"""

from __future__ import annotations

import os

# Before torch (and NCCL) load, in this process and inherited by every child: the GPU hosts forbid
# NVLink multicast.
os.environ.update({"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"})

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernels.backends.base import source_hash  # noqa: E402
from kernels.catalogue import get_slot  # noqa: E402
from kernels.deployment import Deployment  # noqa: E402
from workers.protocol import BenchSettings, RunSpec  # noqa: E402
from workers.tp_group import evaluate_tp, link_info  # noqa: E402

TP_DIR = ROOT / "kernels" / "variants" / "tp"
VARIANTS = {  # slot -> [(variant file, config)]
    "oproj_residual_norm": [("oproj_residual_norm_tp_unfused", {}), ("oproj_residual_norm_tp_fused", {"reduce_dtype": "bf16"}),
                            ("oproj_residual_norm_tp_fused", {"reduce_dtype": "fp32"})],
    "router": [("router_tp_gather_logits", {}), ("router_tp_topk_exchange", {})],
}


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def group_runs(world: int, specs: list[str], batches: list[int], settings: BenchSettings) -> list[dict[str, Any]]:
    rows = []
    for spec_name in specs:
        dep = Deployment(spec=spec_name, tp=world, batch_sizes=batches)
        for slot_name, variants in VARIANTS.items():
            if slot_name == "oproj_residual_norm" and spec_name != specs[0]:
                continue  # o_proj shapes differ only by heads: one spec is enough
            (shape,) = get_slot(slot_name).shapes(dep)
            for fname, config in variants:
                source = (TP_DIR / f"{fname}.py").read_text()
                for m in dep.token_counts():
                    spec = RunSpec(run_id=f"tp{world}-{slot_name}-{fname}-{m}", slot=slot_name, language="torch",
                                   source=source, source_hash=source_hash(source), config=config,
                                   shape=shape.to_json(), m=m, device="cuda", bench=settings, timeout_s=540)
                    t0 = time.time()
                    res = evaluate_tp(spec, world, "cuda")
                    b = res.tp_bench
                    row = {"world": world, "spec": spec_name, "slot": slot_name, "variant": fname, "config": config,
                           "m": m, "verdict": str(res.verdict), "reason_code": res.reason_code,
                           "reason": res.reason[:600], "seconds": round(time.time() - t0, 1),
                           "bench": b.model_dump() if b else None,
                           "check": res.check.model_dump() if res.check else None,
                           "fingerprint": res.fingerprint}
                    rows.append(row)
                    print(f"TP{world} {spec_name:12s} {slot_name:20s} {fname:32s} {json.dumps(config):24s} M={m:3d} "
                          f"{res.verdict:13s}" + (f" variant {b.median_us:8.2f} us  stock {b.baseline_median_us:8.2f} us"
                                                  f"  x{b.speedup:5.2f} [{b.speedup_ci_lo:.2f}, {b.speedup_ci_hi:.2f}]"
                                                  + (f"  replicated {b.replicated_median_us:8.2f} us"
                                                     if b.replicated_median_us is not None else "") if b else
                                                  f" {res.reason_code}: {res.reason[:200]}"), flush=True)
    return rows


def _prefetch_rank(rank: int, world: int, rdzv: str, batches: list[int], rounds: int, results: Any) -> None:
    import torch.distributed as dist

    from kernels.tp.prefetch import L2Prefetcher

    dev = torch.device("cuda", rank)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"file://{rdzv}", rank=rank, world_size=world, device_id=dev)
    n, k, e, sets = 7168, 64 // world * 128, 384, 8  # 8 sets of o_proj + gate weights: > 2x the 60 MB L2
    g = torch.Generator(device=dev).manual_seed(1234)
    bf = torch.bfloat16
    w = [torch.randn(n, k, device=dev, dtype=bf, generator=g) / k ** 0.5 for _ in range(sets)]
    gate = [torch.randn(e, n, device=dev, dtype=bf, generator=g) / n ** 0.5 for _ in range(sets)]
    nw = torch.rand(n, device=dev, dtype=bf, generator=g) + 0.5
    pf = [L2Prefetcher([gw]) for gw in gate]
    out: dict[str, Any] = {}
    for m in batches:
        a = [torch.randn(m, k, device=dev, dtype=bf, generator=g) for _ in range(sets)]
        res = [torch.randn(m, n, device=dev, dtype=bf, generator=g) for _ in range(sets)]

        def step(i: int, prefetch: bool) -> torch.Tensor:
            p = a[i] @ w[i].t()
            if prefetch:
                pf[i].issue()
            dist.all_reduce(p)
            r = p.float() + res[i].float()
            h = (r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + 1e-6) * nw.float()).to(bf)
            if prefetch:
                pf[i].join()
            return h @ gate[i].t()

        graphs = {}
        for mode in (False, True):
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for i in range(sets):
                    step(i, mode)
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for i in range(sets):
                    step(i, mode)
            graphs[mode] = graph
        samples: dict[bool, list[float]] = {False: [], True: []}
        ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for r in range(rounds):
            for mode in ((False, True) if r % 2 == 0 else (True, False)):
                dist.barrier(device_ids=[rank])
                torch.cuda.synchronize()
                ev0.record()
                graphs[mode].replay()
                ev1.record()
                ev1.synchronize()
                samples[mode].append(ev0.elapsed_time(ev1) * 1e3 / sets)
        t = torch.tensor([samples[False], samples[True]], device=dev, dtype=torch.float64)
        every = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(every, t)
        slowest = torch.stack(every).max(dim=0).values.median(dim=1).values.tolist()
        out[str(m)] = {"no_prefetch_us": slowest[0], "prefetch_us": slowest[1],
                       "speedup": slowest[0] / slowest[1], "prefetch_bytes": pf[0].bytes()}
    if rank == 0:
        results.put(out)
    dist.barrier(device_ids=[rank])
    dist.destroy_process_group()


def prefetch_runs(world: int, batches: list[int], rounds: int) -> dict[str, Any]:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(_prefetch_rank, args=(world, os.path.join(tmp, "rdzv"), batches, rounds, results),
                           nprocs=world, join=True, start_method="spawn")
    out = results.get(timeout=60)
    for m, r in out.items():
        print(f"TP{world} prefetch M={m:>3s}: {r['no_prefetch_us']:8.2f} us -> {r['prefetch_us']:8.2f} us "
              f"(x{r['speedup']:.3f})", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", default="2,4,8")
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--specs", default="kimi-k2-like,deepseek-v3")
    ap.add_argument("--quick", action="store_true", help="M=1 and 32 only, fewer rounds")
    ap.add_argument("--no-prefetch", action="store_true")
    args = ap.parse_args()
    gpus = torch.cuda.device_count()
    if gpus < 2:
        print(f"tp_collectives: needs at least 2 GPUs for a TP group; this host has {gpus}. "
              "Run it on a multi-GPU machine (e.g. the nvidia-h200-x2/x4/x8 kinds).", file=sys.stderr)
        return 2
    worlds = [w for w in map(int, args.worlds.split(",")) if w <= gpus]
    batches = [1, 32] if args.quick else [int(b) for b in args.batches.split(",")]
    settings = BenchSettings(warmup=2, min_rounds=10 if args.quick else 30, graph_calls=None, bootstrap=1000)
    report: dict[str, Any] = {
        "date": datetime.now(timezone.utc).isoformat(), "command": " ".join([sys.executable, *sys.argv]),
        "commit": _git("rev-parse", "HEAD"), "dirty": bool(_git("status", "--porcelain")),
        "device": torch.cuda.get_device_name(0), "gpu_count": gpus, "link": link_info(max(worlds)),
        "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        "multicast_env": {k: os.environ[k] for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                                                     "NVSHMEM_DISABLE_NVLS")},
        "groups": [], "prefetch": {}}
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    for world in worlds:
        report["groups"] += group_runs(world, args.specs.split(","), batches, settings)
        if not args.no_prefetch:
            report["prefetch"][str(world)] = prefetch_runs(world, batches, 10 if args.quick else 30)
        (out_dir / "tp_collectives.json").write_text(json.dumps(report, indent=1, default=str))  # after each world
    print(f"wrote {out_dir / 'tp_collectives.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
