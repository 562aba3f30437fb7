"""The five decode-layer slots beyond dense_gemm, on the CPU with the tiny-moe spec: stock and shipped
torch variants pass their checks, inputs are fresh and seeded, and each check rule rejects the ways a
kernel goes wrong (unwritten outputs, a wrong corner element, NaN, a wrong expert, cached answers)."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path
from types import ModuleType

import pytest
import torch

import kernels
from kernels.catalogue import all_slots, get_slot
from kernels.deployment import Deployment
from kernels.slots.base import CheckOutcome, KernelFn, Shape, Slot
from kernels.slots.moe_experts import expected_distinct_experts
from kernels.slots.router import SCORE_DELTA_SIGMOID, grouped_topk

CPU = torch.device("cpu")
TINY = Deployment(spec="tiny-moe", tp=2)
SLOTS = ("router", "moe_experts", "shared_expert", "oproj_residual_norm", "add_rmsnorm", "rmsnorm_gemm",
         "mla_norms_gemm", "moe_experts_shared")
DENSE_SLOTS = ("moe_experts", "shared_expert", "oproj_residual_norm", "add_rmsnorm", "rmsnorm_gemm",
               "mla_norms_gemm", "moe_experts_shared")
# the moe_experts kernels take the shared form as they are (more experts, longer rows): one file serves both
VARIANT_PREFIX = {"moe_experts_shared": "moe_experts"}
BATCHES = (1, 2, 4, 8, 16, 32, 64)
VARIANT_DIR = Path(kernels.__file__).parent / "variants" / "torch"


def tiny_shape(slot_name: str) -> tuple[Slot, Shape]:
    slot = get_slot(slot_name)
    (shape,) = slot.shapes(TINY)
    return slot, shape


def run_trial(slot: Slot, shape: Shape, fn: KernelFn, m: int, seed: int):
    """One check trial as the harness runs it: fresh inputs, poisoned outputs, inputs unchanged."""
    inputs = slot.make_inputs(shape, m, seed, CPU)
    before = {k: v.clone() for k, v in inputs.items()}
    outputs = slot.alloc_outputs(shape, m, CPU)
    slot.poison(outputs)
    assert fn(**inputs, **outputs) is None
    for k, v in inputs.items():
        assert torch.equal(v, before[k]), f"{k} was written"
    ref = slot.reference(shape, inputs)
    return slot.check(shape, outputs, ref, inputs), inputs, outputs, ref


def stock_trial(slot_name: str, m: int = 8, seed: int = 0):
    slot, shape = tiny_shape(slot_name)
    outcome, inputs, outputs, ref = run_trial(slot, shape, slot.stock(shape, m), m, seed)
    assert outcome.passed, outcome.reason
    return slot, shape, inputs, outputs, ref


def fails(outcome: CheckOutcome, *words: str) -> None:
    assert not outcome.passed
    for w in words:
        assert w in outcome.reason, f"{w!r} not in {outcome.reason!r}"


def load_variant(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"shipped_{path.stem}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def variant_cases() -> list[tuple[str, Path, dict]]:
    cases = []
    for slot_name in SLOTS:
        paths = sorted(VARIANT_DIR.glob(f"{VARIANT_PREFIX.get(slot_name, slot_name)}_*.py"))
        assert paths, f"no shipped torch variant for {slot_name}"
        for path in paths:
            space = load_variant(path).CONFIG_SPACE
            for values in itertools.product(*space.values()):
                cases.append((slot_name, path, dict(zip(space, values))))
    return cases


def test_catalogue_registers_every_slot():
    assert set(all_slots()) == {"dense_gemm", *SLOTS}


# --- stock, variants, inputs --------------------------------------------------------------------

@pytest.mark.parametrize("slot_name", SLOTS)
def test_stock_passes(slot_name):
    slot, shape = tiny_shape(slot_name)
    for m in (1, 3, 16, 64):
        outcome, *_ = run_trial(slot, shape, slot.stock(shape, m), m, seed=10 + m)
        assert outcome.passed, f"M={m}: {outcome.reason}"


@pytest.mark.parametrize("slot_name,path,config", variant_cases(),
                         ids=lambda v: v.stem if isinstance(v, Path) else str(v))
def test_shipped_variant_passes(slot_name, path, config):
    slot, shape = tiny_shape(slot_name)
    module = load_variant(path)
    for m in BATCHES:
        fn = module.build(config, shape.as_build_arg(m))
        outcome, *_ = run_trial(slot, shape, fn, m, seed=100 + m)
        assert outcome.passed, f"{path.stem} {config} M={m}: {outcome.reason}"


@pytest.mark.parametrize("slot_name", SLOTS)
def test_inputs_seeded_and_fresh(slot_name):
    slot, shape = tiny_shape(slot_name)
    a = slot.make_inputs(shape, 4, 7, CPU)
    b = slot.make_inputs(shape, 4, 7, CPU)
    c = slot.make_inputs(shape, 4, 8, CPU)
    assert a.keys() == b.keys() == set(slot.input_names)
    for k in a:
        assert torch.equal(a[k], b[k]), f"{k} not deterministic in the seed"
        if a[k].is_floating_point():
            assert a[k].float().std() > 0 and (a[k] != 0).all(), f"{k} is constant or has zeros"
    ra, rc = slot.reference(shape, a), slot.reference(shape, c)
    for k in slot.output_names:
        assert not torch.equal(ra[k], rc[k]), f"reference {k} did not change with the seed"


def test_moe_inputs_route_to_distinct_experts():
    slot, shape = tiny_shape("moe_experts")
    inputs = slot.make_inputs(shape, 32, 3, CPU)
    ids, w = inputs["topk_ids"], inputs["topk_weights"]
    assert ids.dtype == torch.int32 and ids.min() >= 0 and ids.max() < shape.dims["E"]
    assert (ids.sort(dim=1).values.diff(dim=1) != 0).all()
    assert (w > 0).all()


def test_moe_bench_sets_share_weights_and_vary_routing():
    slot, shape = tiny_shape("moe_experts")
    sets = slot.input_sets(shape, 8, 5, CPU, 3)
    assert all(s["w13"] is sets[0]["w13"] and s["w2"] is sets[0]["w2"] for s in sets)
    assert not torch.equal(sets[0]["x"], sets[1]["x"])
    assert not torch.equal(sets[0]["topk_ids"], sets[1]["topk_ids"])
    single = slot.make_inputs(shape, 8, 5, CPU)
    assert all(torch.equal(single[k], sets[0][k]) for k in single)


def test_moe_bytes_count_expected_distinct_experts():
    slot = get_slot("moe_experts")
    (shape,) = slot.shapes(Deployment())
    expert_bytes = 3 * 256 * 7168 * 2
    assert expected_distinct_experts(384, 8, 1) == 8
    assert expected_distinct_experts(384, 8, 64) == 284  # 384 * (1 - (1 - 8/384)^64)
    act = 2 * 64 * 7168 * 2 + 64 * 8 * 8
    assert slot.bytes_moved(shape, 64) == 284 * expert_bytes + act
    assert slot.flops(shape, 1) == 6 * 8 * 7168 * 256


def test_bytes_moved_read_every_input_once():
    d = Deployment()
    (router,) = get_slot("router").shapes(d)
    assert get_slot("router").bytes_moved(router, 1) == (7168 + 384 * 7168) * 2 + 384 * 4 + 8 * 8
    (oproj,) = get_slot("oproj_residual_norm").shapes(d)
    assert get_slot("oproj_residual_norm").bytes_moved(oproj, 2) == (2 * 1024 + 7168 * 1024 + 3 * 2 * 7168 + 7168) * 2
    (norm,) = get_slot("add_rmsnorm").shapes(d)
    assert get_slot("add_rmsnorm").bytes_moved(norm, 2) == (4 * 2 * 7168 + 7168) * 2


# --- every rule rejects what it must --------------------------------------------------------------

@pytest.mark.parametrize("slot_name", SLOTS)
def test_unwritten_outputs_fail(slot_name):
    slot, shape = tiny_shape(slot_name)
    inputs = slot.make_inputs(shape, 4, 0, CPU)
    outputs = slot.alloc_outputs(shape, 4, CPU)
    slot.poison(outputs)
    fails(slot.check(shape, outputs, slot.reference(shape, inputs), inputs))


@pytest.mark.parametrize("slot_name", ("oproj_residual_norm", "add_rmsnorm"))
def test_second_output_left_unwritten_fails(slot_name):
    slot, shape, inputs, outputs, ref = stock_trial(slot_name)
    outputs["residual_out"][-1].fill_(float("nan"))  # last row never stored
    fails(slot.check(shape, outputs, ref, inputs), "residual_out", "NaN")


@pytest.mark.parametrize("slot_name,output", [(s, o) for s in DENSE_SLOTS for o in get_slot(s).output_names])
def test_wrong_corner_element_fails(slot_name, output):
    slot, shape, inputs, outputs, ref = stock_trial(slot_name, m=16)
    r = ref[output]
    rms = (r.norm() / r.numel() ** 0.5).item()
    # Off by 15% of the output's rms: what a dropped partial tile or one lost addend looks like.
    outputs[output][-1, -1] = (r[-1, -1] + 0.15 * rms + 0.05 * r[-1, -1].abs()).to(outputs[output].dtype)
    fails(slot.check(shape, outputs, ref, inputs), output, "elements outside")


@pytest.mark.parametrize("slot_name,output", [(s, o) for s in SLOTS for o in get_slot(s).output_names
                                              if o != "topk_ids"])
def test_nan_element_fails(slot_name, output):
    slot, shape, inputs, outputs, ref = stock_trial(slot_name)
    outputs[output][2, 1] = float("nan")
    fails(slot.check(shape, outputs, ref, inputs), output, "NaN")


@pytest.mark.parametrize("slot_name", SLOTS)
def test_cached_answer_of_other_inputs_fails(slot_name):
    slot, shape = tiny_shape(slot_name)
    m = 8
    _, _, stale, _ = run_trial(slot, shape, slot.stock(shape, m), m, seed=1)
    inputs = slot.make_inputs(shape, m, 2, CPU)
    outcome = slot.check(shape, stale, slot.reference(shape, inputs), inputs)
    fails(outcome, "topk_ids" if slot_name == "router" else "out")


# --- the router's rule ------------------------------------------------------------------------------

def router_outputs(ids: torch.Tensor, scores: torch.Tensor, shape: Shape) -> dict[str, torch.Tensor]:
    """What a correct kernel writes for the expert sets ``ids``: weights from the exact scores."""
    w = scores.gather(1, ids.long())
    w = w / w.sum(dim=1, keepdim=True) * shape.dims["scaling"]
    return {"topk_ids": ids.to(torch.int32).clone(), "topk_weights": w.float()}


def test_router_order_within_row_does_not_matter():
    slot, shape, inputs, outputs, ref = stock_trial("router")
    flipped = {k: v.flip(1) for k, v in outputs.items()}
    assert slot.check(shape, flipped, ref, inputs).passed


def test_router_poisoned_and_duplicate_ids_fail():
    slot, shape, inputs, outputs, ref = stock_trial("router")
    poisoned = {**outputs, "topk_ids": outputs["topk_ids"].clone()}
    poisoned["topk_ids"][-1, -1] = -1
    fails(slot.check(shape, poisoned, ref, inputs), "outside")
    dup = {**outputs, "topk_ids": outputs["topk_ids"].clone()}
    dup["topk_ids"][0, 1] = dup["topk_ids"][0, 0]
    fails(slot.check(shape, dup, ref, inputs), "repeat")


def test_router_wrong_expert_fails():
    slot, shape, inputs, outputs, ref = stock_trial("router")
    ids = outputs["topk_ids"].clone()
    row = ids[0].tolist()
    worst = next(e for e in ref["choice"][0].argsort().tolist() if e not in row)  # the least likely expert
    ids[0, -1] = worst
    fails(slot.check(shape, router_outputs(ids, ref["scores"], shape), ref, inputs), "row 0", "tie margin")


def test_router_rows_swapped_fail():
    slot, shape, inputs, outputs, ref = stock_trial("router")
    swapped = {k: v[[1, 0, *range(2, v.shape[0])]].clone() for k, v in outputs.items()}
    fails(slot.check(shape, swapped, ref, inputs), "topk_ids row 0")


@pytest.mark.parametrize("gap,passes", [(0.5 * SCORE_DELTA_SIGMOID, True), (5 * SCORE_DELTA_SIGMOID, False)])
def test_router_tie_margin(gap, passes):
    """Move the (k+1)-th expert of token 0 to ``gap`` below the k-th through the bias, then pick it
    instead of the k-th: a near tie passes, a clear loser fails."""
    slot, shape = tiny_shape("router")
    d = shape.dims
    inputs = slot.make_inputs(shape, 4, 0, CPU)
    ref = slot.reference(shape, inputs)
    ids, _, choice = grouped_topk(ref["scores"], inputs["bias"], d["top_k"] + 1, d["n_group"], d["topk_group"],
                                  d["scaling"], d["norm"])
    kth, runner_up = ids[0, -2].item(), ids[0, -1].item()
    inputs["bias"][runner_up] += choice[0, kth] - choice[0, runner_up] - gap
    ref = slot.reference(shape, inputs)
    assert ref["topk_ids"][0, -1].item() == kth  # the k-th is still the k-th
    chosen = ref["topk_ids"].clone()
    chosen[0, -1] = runner_up
    outcome = slot.check(shape, router_outputs(chosen, ref["scores"], shape), ref, inputs)
    assert outcome.passed == passes, outcome.reason
    if not passes:
        fails(outcome, "tie margin")


def test_router_wrong_weights_fail():
    slot, shape, inputs, outputs, ref = stock_trial("router")
    off = {**outputs, "topk_weights": outputs["topk_weights"].clone()}
    off["topk_weights"][-1, -1] *= 1.05
    fails(slot.check(shape, off, ref, inputs), "topk_weights")
    unnormalised = {**outputs, "topk_weights": ref["scores"].gather(1, outputs["topk_ids"].long()).float()}
    fails(slot.check(shape, unnormalised, ref, inputs), "topk_weights")


def test_router_ignoring_the_bias_fails():
    slot, shape = tiny_shape("router")
    d = shape.dims
    m = 64
    inputs = slot.make_inputs(shape, m, 0, CPU)
    ref = slot.reference(shape, inputs)
    no_bias, _, _ = grouped_topk(ref["scores"], torch.zeros_like(inputs["bias"]), d["top_k"], d["n_group"],
                                 d["topk_group"], d["scaling"], d["norm"])
    fails(slot.check(shape, router_outputs(no_bias, ref["scores"], shape), ref, inputs), "tie margin")


def test_router_softmax_scoring_stock_passes():
    slot = get_slot("router")
    shape = Shape("router", "router_gate", {"E": 32, "K": 256, "top_k": 4, "n_group": 1, "topk_group": 1,
                                            "scaling": 1.0, "norm": False, "scoring": "softmax"})
    for m in (1, 8, 64):
        outcome, *_ = run_trial(slot, shape, slot.stock(shape, m), m, seed=m)
        assert outcome.passed, f"M={m}: {outcome.reason}"
