"""workers/chain.py on a machine with no GPU: which variants get the chained trial, and the producer's order in its
sm_90a PTX (let the dependent launch, hold, then copy). The race itself runs on the GPU:
KT_TEST_DEVICE=cuda pytest tests/test_cheats.py -k chained."""

from __future__ import annotations

import types

import torch

from kernels.slots.dense_gemm import DenseGemm
from workers import chain


def _module(build) -> types.ModuleType:
    mod = types.ModuleType("m")
    mod.build = build
    return mod


def test_only_a_build_that_takes_pdl_on_an_sm90_gpu_is_chainable() -> None:
    takes = _module(lambda config, shape, pdl=0: None)
    plain = _module(lambda config, shape: None)
    cpu = torch.device("cpu")
    assert not chain.chainable(takes, cpu) and not chain.chainable(plain, cpu)
    assert not chain.chainable(types.ModuleType("no_build"), cpu)


def test_the_activations_are_the_inputs_that_are_not_weights() -> None:
    assert chain.activation_names(DenseGemm()) == ["x"]


def test_the_producer_lets_the_dependent_launch_then_holds_then_copies() -> None:
    body = [ln.strip() for ln in chain.producer_ptx().splitlines()]

    def first(needle: str) -> int:
        return next(i for i, ln in enumerate(body) if needle in ln)

    trigger, hold = first("griddepcontrol.launch_dependents"), first("%globaltimer")
    assert trigger < hold < first("ld.global") < first("st.global")
    assert "nanosleep.u32" in body[hold] and "bra KT_HOLD" in body[hold]


def test_the_producer_copies_up_to_four_activations_in_one_launch() -> None:
    """Every activation of a slot is raced (the MoE slot has three: x, expert ids, weights), each copy after the
    hold; a fifth would need another launch, which would end before the chained kernel starts."""
    body = [ln.strip() for ln in chain.producer_ptx().splitlines()]
    hold = next(i for i, ln in enumerate(body) if "%globaltimer" in ln)
    stores = [i for i, ln in enumerate(body) if "st.global" in ln]
    assert chain.PAIRS == 4 and stores and min(stores) > hold
    import pytest

    with pytest.raises(ValueError, match="1 to 4 activations"):
        chain.produce([])
    from kernels.catalogue import get_slot

    assert len(chain.activation_names(get_slot("moe_experts"))) <= chain.PAIRS
