"""The shared expert as one more routed expert (kernels/slots/moe_experts_shared.py): the slot's inputs and shapes,
router_fused.py writing the shared column beside its top-k (shape ``shared``), and the moe_experts kernels taking the
longer rows, checked against the slot's reference under Triton's interpreter."""

from __future__ import annotations

import sys

import pytest
import torch

from cute_ptx_helpers import ROOT
from kernels.catalogue import get_slot
from kernels.deployment import Deployment

sys.path.insert(0, str(ROOT / "bench"))
from moe_block import load  # noqa: E402

TINY = Deployment(spec="tiny-moe", tp=2)
CPU = torch.device("cpu")
ROUTER_SHAPE = {"E": 32, "K": 512, "top_k": 4, "n_group": 4, "topk_group": 2, "scaling": 2.5, "scoring": "sigmoid",
                "norm": True}
ROUTERS = {  # one launch (the last CTA's epilogue, one top-k pick at a time), and the separate bitonic epilogue
    "fused_fma": ({"MATH": "fma", "BLOCK_E": 16, "BLOCK_K": 128, "SPLIT_K": 4, "BLOCK_M": 1, "EPILOGUE": "fused",
                   "EPI_M": 1, "EPI_WARPS": 1, "TOPK": "pick", "PDL": 0, "num_warps": 1, "num_stages": 2}, 1),
    "separate_dot": ({"MATH": "dot", "BLOCK_E": 16, "BLOCK_K": 128, "SPLIT_K": 4, "BLOCK_M": 16,
                      "EPILOGUE": "separate", "EPI_M": 1, "EPI_WARPS": 4, "TOPK": "bitonic", "PDL": 0, "num_warps": 2,
                      "num_stages": 2}, 3),
}


def test_the_slot_puts_the_shared_experts_last_in_every_row_with_weight_one() -> None:
    slot = get_slot("moe_experts_shared")
    (shape,) = slot.shapes(TINY)
    assert shape.dims == {"E": 17, "K": 256, "I": 32, "top_k": 5, "shared": 1}
    inp = slot.make_inputs(shape, 6, 3, CPU)
    ids, w = inp["topk_ids"], inp["topk_weights"]
    assert (ids[:, -1] == 16).all() and (w[:, -1] == 1.0).all()
    routed = ids[:, :-1]
    assert (routed < 16).all() and all(len(set(r.tolist())) == 4 for r in routed)
    assert torch.allclose(w[:, :-1].sum(dim=1), torch.full((6,), 2.5))
    # the stock (vLLM's per-expert loop) passes, and a kernel that leaves the shared expert out fails
    out = slot.alloc_outputs(shape, 6, CPU)
    slot.stock(shape, 6)(**inp, **out)
    ref = slot.reference(shape, inp)
    assert slot.check(shape, out, ref, inp).passed
    slot.stock(shape, 6)(**{**inp, "topk_weights": torch.cat([w[:, :-1], torch.zeros(6, 1)], dim=1)}, **out)
    assert not slot.check(shape, out, ref, inp).passed


def test_the_shared_experts_are_read_once_more_than_the_routed_ones() -> None:
    routed, shared = get_slot("moe_experts"), get_slot("moe_experts_shared")
    k2 = Deployment(spec="kimi-k2-like", tp=8)
    (rs,), (ss,) = routed.shapes(k2), shared.shapes(k2)
    expert = 3 * 256 * 7168 * 2
    for m in (1, 16):
        extra = shared.bytes_moved(ss, m) - routed.bytes_moved(rs, m)
        assert expert <= extra < expert + 16 * m  # one more expert, and one more routing column a token


def test_router_refuses_outputs_that_are_not_its_rows() -> None:
    mod = load("router_fused")
    fn = mod.build(ROUTERS["fused_fma"][0], {**ROUTER_SHAPE, "M": 1, "shared": 1})
    x, w, bias = torch.zeros(1, 512, dtype=torch.bfloat16), torch.zeros(32, 512, dtype=torch.bfloat16), torch.zeros(32)
    with pytest.raises(ValueError, match=r"\[1, 5\]"):
        fn(x=x, w=w, bias=bias, topk_ids=torch.empty(1, 4, dtype=torch.int32), topk_weights=torch.empty(1, 4))
    with pytest.raises(ValueError, match="shared=-1"):
        mod.build(ROUTERS["fused_fma"][0], {**ROUTER_SHAPE, "M": 1, "shared": -1})(
            x=x, w=w, bias=bias, topk_ids=torch.empty(1, 3, dtype=torch.int32), topk_weights=torch.empty(1, 3))


def router_writes_the_shared_column(name: str) -> None:
    cfg, m = ROUTERS[name]
    mod = load("router_fused")
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(m, 512, generator=gen).to(torch.bfloat16)
    w = (torch.randn(32, 512, generator=gen) * 512 ** -0.5).to(torch.bfloat16)
    bias = torch.randn(32, generator=gen) * 0.02
    plain = (torch.empty(m, 4, dtype=torch.int32), torch.empty(m, 4))
    mod.build(cfg, {**ROUTER_SHAPE, "M": m})(x=x, w=w, bias=bias, topk_ids=plain[0], topk_weights=plain[1])
    both = (torch.full((m, 6), -1, dtype=torch.int32), torch.full((m, 6), float("nan")))
    mod.build(cfg, {**ROUTER_SHAPE, "M": m, "shared": 2})(x=x, w=w, bias=bias, topk_ids=both[0],
                                                          topk_weights=both[1])
    assert torch.equal(both[0][:, :4], plain[0]) and torch.equal(both[1][:, :4], plain[1])
    assert both[0][:, 4:].tolist() == [[32, 33]] * m and both[1][:, 4:].tolist() == [[1.0, 1.0]] * m


def experts_kernel_takes_the_shared_rows(stem: str, cfg: dict, m: int) -> None:
    slot = get_slot("moe_experts_shared")
    (shape,) = slot.shapes(TINY)
    inp = slot.make_inputs(shape, m, 5, CPU)
    out = slot.alloc_outputs(shape, m, CPU)
    slot.poison(out)
    load(stem).build(cfg, shape.as_build_arg(m))(**inp, **out)
    outcome = slot.check(shape, out, slot.reference(shape, inp), inp)
    assert outcome.passed, outcome.reason


CASES = {
    **{f"router_{n}": (router_writes_the_shared_column, (n,)) for n in ROUTERS},
    "gemv_m1": (experts_kernel_takes_the_shared_rows,
                ("moe_experts_gemv", {"BLOCK_N": 4, "BLOCK_K": 128, "SPLIT_K": 2, "num_warps": 2, "BLOCK_N2": 2,
                                      "BLOCK_K2": 32, "num_warps2": 1, "PDL": 0}, 1)),
    "grouped_m5": (experts_kernel_takes_the_shared_rows, ("moe_experts_grouped", {}, 5)),
}


@pytest.fixture(scope="module")
def interpreted() -> dict[str, str]:
    from support.interpreted import interpreted_results
    return interpreted_results(__file__)


@pytest.mark.parametrize("case", sorted(CASES))
def test_under_the_interpreter(interpreted, case: str) -> None:
    assert interpreted[case] == "ok", interpreted[case]


if __name__ == "__main__":  # the child process: TRITON_INTERPRET=1 was set before triton's import
    from support.interpreted import run_cases

    run_cases(CASES)
