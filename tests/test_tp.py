"""TP forms of oproj_residual_norm and router, evaluated as process groups with gloo on the CPU.

Every group test starts real rank processes (workers/tp_group.py): world sizes 2 and 4 on the tiny-moe
spec. Shipped stock-form and fused variants pass; a variant that forgets the all-reduce or reduces
twice fails the check; ranks that disagree fail; a crashing or hanging rank gives a verdict within
the limit and leaves no process behind. The GPU paths (NCCL, CUDA graphs, L2 prefetch) need GPUs:
here only their CPU-visible parts run (PTX of the prefetch kernel, topology parsing).
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from types import ModuleType

import pytest
import torch

import kernels
from kernels.backends.base import source_hash
from kernels.catalogue import get_slot
from kernels.deployment import Deployment
from kernels.slots.base import Shape
from kernels.specs import BUILTIN_CONFIGS
from workers.protocol import BenchSettings, RunSpec, Verdict
from workers.tp_group import evaluate_tp, group_members, parse_topology
from workers.tp_protocol import TPRunResult

TP_DIR = Path(kernels.__file__).parent / "variants" / "tp"
QUICK = BenchSettings(warmup=1, input_sets=2, min_rounds=3, max_rounds=3, min_time_s=0.0, bootstrap=100)
M = 8


def shape_for(slot_name: str, world: int, spec: str | dict = "tiny-moe") -> Shape:
    (shape,) = get_slot(slot_name).shapes(Deployment(spec=spec, tp=world, batch_sizes=[M]))
    return shape


def run_spec(slot_name: str, source: str, shape: Shape, config: dict | None = None, timeout_s: float = 120.0) -> RunSpec:
    return RunSpec(run_id=f"tp-{slot_name}", slot=slot_name, language="torch", source=source,
                   source_hash=source_hash(source), config=config or {}, shape=shape.to_json(), m=M, seed=7,
                   bench=QUICK, timeout_s=timeout_s)


def shipped(name: str) -> str:
    return (TP_DIR / f"{name}.py").read_text()


def evaluate(slot_name: str, source: str, world: int, config: dict | None = None, spec: str | dict = "tiny-moe",
             timeout_s: float = 120.0) -> TPRunResult:
    return evaluate_tp(run_spec(slot_name, source, shape_for(slot_name, world, spec), config, timeout_s), world, "cpu")


def assert_no_orphans(result: TPRunResult) -> None:
    assert result.group_pgid is not None
    assert group_members(result.group_pgid) == [], "processes of the TP group outlived the call"
    for r in result.ranks:
        assert r.pid is not None
        try:
            state = Path(f"/proc/{r.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # gone
        assert state == "Z", f"rank {r.rank} (pid {r.pid}) still running"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"tp_{name}", TP_DIR / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the TP variants' single-device form (comm=None): the TP=1 slot's maths ------------------------

@pytest.mark.parametrize("slot_name,name,config", [
    ("oproj_residual_norm", "oproj_residual_norm_tp_unfused", {}),
    ("oproj_residual_norm", "oproj_residual_norm_tp_fused", {"reduce_dtype": "bf16"}),
    ("oproj_residual_norm", "oproj_residual_norm_tp_fused", {"reduce_dtype": "fp32"}),
    ("router", "router_tp_gather_logits", {}),
    ("router", "router_tp_topk_exchange", {}),
])
@pytest.mark.parametrize("spec", ["tiny-moe", "deepseek-v3"])
def test_tp_variants_run_single_device_maths_without_comm(slot_name: str, name: str, config: dict, spec: str) -> None:
    slot = get_slot(slot_name)
    shape = shape_for(slot_name, 2 if spec == "tiny-moe" else 8, spec)
    fn = load(name).build(config, shape.as_build_arg(M))
    inputs = slot.make_inputs(shape, M, 3, torch.device("cpu"))
    outputs = slot.alloc_outputs(shape, M, torch.device("cpu"))
    slot.poison(outputs)
    fn(**inputs, **outputs)
    outcome = slot.check(shape, outputs, slot.reference(shape, inputs), inputs)
    assert outcome.passed, outcome.reason


# --- groups that pass -----------------------------------------------------------------------------

@pytest.mark.parametrize("slot_name,name,config,world", [
    ("oproj_residual_norm", "oproj_residual_norm_tp_unfused", {}, 2),
    ("oproj_residual_norm", "oproj_residual_norm_tp_fused", {"reduce_dtype": "fp32"}, 2),
    ("oproj_residual_norm", "oproj_residual_norm_tp_fused", {"reduce_dtype": "bf16"}, 4),
    ("router", "router_tp_gather_logits", {}, 2),
    ("router", "router_tp_topk_exchange", {}, 2),
    ("router", "router_tp_topk_exchange", {}, 4),
])
def test_shipped_tp_variants_pass_as_a_group(slot_name: str, name: str, config: dict, world: int) -> None:
    result = evaluate(slot_name, shipped(name), world, config)
    assert result.verdict == Verdict.passed, (result.reason_code, result.reason)
    assert result.cross_rank_identical is True
    assert result.stock_check is not None and result.stock_check.passed  # the TP stock form passes too
    assert result.check is not None and [t.kind for t in result.check.trials][:3] == \
        ["fresh", "fresh_again", "same_buffers_new_values"]
    assert len(result.ranks) == world and all(r.verdict == Verdict.passed and r.exit_code == 0 for r in result.ranks)
    assert result.tp_bench is not None and result.tp_bench.world_size == world
    assert len(result.tp_bench.rank_medians_us) == world
    assert (result.tp_bench.replicated_median_us is not None) == (slot_name == "router")
    fp = result.fingerprint
    assert fp["world_size"] == world and fp["tp_backend"] == "gloo" and fp["gpu_count"] == 0
    assert fp["link"]["type"] == "loopback" and fp["tp_hardware_key"].endswith(f"-tp{world}-loopback")
    assert len(fp["rank_devices"]) == world
    assert_no_orphans(result)


def test_candidate_exchange_with_groups_spanning_ranks() -> None:
    """2 groups of 8 experts over 4 ranks: each group is split over two ranks (group-aware exchange)."""
    spec = {**BUILTIN_CONFIGS["tiny-moe"], "n_group": 2, "topk_group": 1, "kerneltune_name": "tiny-2groups"}
    result = evaluate("router", shipped("router_tp_topk_exchange"), 4, spec=spec)
    assert result.verdict == Verdict.passed, (result.reason_code, result.reason)


# --- groups that must fail ------------------------------------------------------------------------

FORGETS_ALL_REDUCE = '''
import torch

def build(config, shape, comm=None):
    eps = float(shape["eps"])

    def run(a, w, residual, norm_weight, out, residual_out):
        r = torch.matmul(a, w.t()).float() + residual.float()   # the partial alone: no all-reduce
        residual_out.copy_(r)
        out.copy_(r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + eps) * norm_weight.float())
    return run
'''

REDUCES_TWICE = '''
import torch

def build(config, shape, comm=None):
    eps = float(shape["eps"])

    def run(a, w, residual, norm_weight, out, residual_out):
        p = torch.matmul(a, w.t()).float()
        if comm is not None:
            comm.all_reduce_(p)
            comm.all_reduce_(p)   # the sum of the sum: world_size times too large
        r = p + residual.float()
        residual_out.copy_(r)
        out.copy_(r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + eps) * norm_weight.float())
    return run
'''


@pytest.mark.parametrize("source,codes", [(FORGETS_ALL_REDUCE, {"ranks_disagree", "mismatch"}),
                                          (REDUCES_TWICE, {"mismatch"})])
def test_wrong_reduction_fails_the_check(source: str, codes: set[str]) -> None:
    result = evaluate("oproj_residual_norm", source, 2)
    assert result.verdict == Verdict.check_failed, (result.reason_code, result.reason)
    assert result.reason_code in codes
    assert_no_orphans(result)


# Each rank's answer is within the router's tolerance, but rank 1 rounds its weights differently:
# the ranks would run different MoE layers.
DISAGREEING_ROUTER = shipped("router_tp_gather_logits").replace(
    "        torch.mul(wts, scaling, out=topk_weights)",
    "        torch.mul(wts, scaling * (1.0 + 1e-4 * (comm is not None and comm.rank == 1)), out=topk_weights)")


def test_ranks_disagreeing_on_router_topk_fail() -> None:
    assert DISAGREEING_ROUTER != shipped("router_tp_gather_logits")
    result = evaluate("router", DISAGREEING_ROUTER, 2)
    assert result.verdict == Verdict.check_failed, (result.reason_code, result.reason)
    assert result.reason_code == "ranks_disagree" and result.cross_rank_identical is False
    assert "topk_weights: rank 1 differs" in result.reason


# --- ranks that crash or hang ---------------------------------------------------------------------

CRASHES_ON_RANK_1 = '''
import os
import torch

def build(config, shape, comm=None):
    def run(a, w, residual, norm_weight, out, residual_out):
        if comm is not None and comm.rank == 1:
            os._exit(3)                           # rank 1 dies while rank 0 waits in the all-reduce
        p = torch.matmul(a, w.t())
        comm.all_reduce_(p)
    return run
'''

HANGS_ON_RANK_1 = '''
import time
import torch

def build(config, shape, comm=None):
    def run(a, w, residual, norm_weight, out, residual_out):
        if comm is not None and comm.rank == 1:
            time.sleep(3600)
        p = torch.matmul(a, w.t())
        comm.all_reduce_(p)
    return run
'''


def test_crashing_rank_is_a_verdict_and_the_group_is_gone() -> None:
    t0 = time.monotonic()
    result = evaluate("oproj_residual_norm", CRASHES_ON_RANK_1, 2, timeout_s=60)
    assert time.monotonic() - t0 < 60
    assert result.verdict == Verdict.crashed, (result.reason_code, result.reason)
    assert result.reason_code == "rank_exit_3" and "rank 1" in result.reason
    assert result.ranks[1].exit_code == 3 and result.ranks[1].verdict is None
    assert_no_orphans(result)


def test_hanging_rank_times_out_and_the_group_is_gone() -> None:
    limit = 15.0
    t0 = time.monotonic()
    result = evaluate("oproj_residual_norm", HANGS_ON_RANK_1, 2, timeout_s=limit)
    assert time.monotonic() - t0 < limit + 15
    assert result.verdict == Verdict.timeout, (result.reason_code, result.reason)
    assert "1" in result.reason.split("ranks still running:")[1]
    assert_no_orphans(result)


def test_world_size_that_does_not_split_the_experts_is_refused_before_starting() -> None:
    shape = shape_for("router", 2)
    result = evaluate_tp(run_spec("router", shipped("router_tp_topk_exchange"), shape), 3, "cpu")
    assert result.verdict == Verdict.error and result.reason_code == "bad_tp_request"
    assert "do not split over 3 ranks" in result.reason and result.ranks == []


def test_cuda_request_without_enough_gpus_is_refused() -> None:
    if torch.cuda.device_count() >= 2:
        pytest.skip("this host has GPUs")
    result = evaluate_tp(run_spec("router", shipped("router_tp_topk_exchange"), shape_for("router", 2)), 2, "cuda")
    assert result.verdict == Verdict.error and "need 2 GPUs" in result.reason


# --- GPU-only parts, their CPU-visible side -------------------------------------------------------

def test_prefetch_is_skipped_on_cpu_and_its_ptx_keeps_lines_in_l2() -> None:
    from kernels.tp.prefetch import L2Prefetcher, compile_ptx, prefetch_unavailable

    assert "CUDA-only" in prefetch_unavailable(torch.device("cpu"))
    with pytest.raises(RuntimeError, match="CUDA-only"):
        L2Prefetcher([torch.zeros(1024)])
    loads = [line for line in compile_ptx(90).splitlines() if "ld.global" in line]
    assert loads and all("evict_last" in line and "L2::cache_hint" in line for line in loads)


TOPO = """\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\x1b[0m
GPU0\t X \tNV18\tNV18\tSYS\t0-63\t0
GPU1\tNV18\t X \tNV18\tSYS\t0-63\t0
GPU2\tNV18\tNV18\t X \tSYS\t0-63\t0
GPU3\tSYS\tSYS\tSYS\t X \t64-127\t1
"""


def test_topology_link_type() -> None:
    assert parse_topology(TOPO, 2) == "NV18"
    assert parse_topology(TOPO, 3) == "NV18"
    assert parse_topology(TOPO, 4) == "NV18+SYS"
    assert parse_topology("no GPUs here", 2) == "unknown"


def test_group_environment_keeps_multicast_off() -> None:
    from workers.tp_group import group_environment
    from workers.tp_protocol import TPRunSpec

    spec = run_spec("router", shipped("router_tp_topk_exchange"), shape_for("router", 2))
    env = group_environment(TPRunSpec(run=spec, world_size=2, device="cuda"), "/tmp/x")
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert env["NVSHMEM_DISABLE_NVLS"] == "1"
    assert not any("TOKEN" in k or "SECRET" in k for k in env)
