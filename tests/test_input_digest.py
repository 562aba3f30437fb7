"""workers.check.hash_tensors on large inputs: digested in place (two random linear sums of the raw
32-bit words) instead of copied to the host, and still changed by any write."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import workers.check as check
from evaluation_helpers import QUICK_BENCH, SHIPPED, run_cheat, run_source
from kernels.slots.base import Shape
from workers.protocol import Verdict


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every tensor takes the in-place digest, in chunks of 1024 words so that chunk order matters.
    monkeypatch.setattr(check, "DEVICE_DIGEST_MIN_BYTES", 0)
    monkeypatch.setattr(check, "_DIGEST_WORDS", 1024)
    monkeypatch.setattr(check, "_coefficients", check._coefficient_source())


def _inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn((64, 100), generator=g).to(torch.bfloat16),  # 3200 words: 4 chunks
            "ids": torch.randint(0, 384, (5, 8), generator=g, dtype=torch.int32)}


def test_same_values_in_other_tensors_give_the_same_digest(small_chunks: None) -> None:
    a = _inputs()
    b = {k: v.clone() for k, v in a.items()}
    assert check.hash_tensors(a) == check.hash_tensors(b)
    assert check.hash_tensors(a) != check.hash_tensors(_inputs(seed=1))


@pytest.mark.parametrize("index", [0, 1, 3199, 6399])  # both halves of a word, last chunk, last element
def test_one_changed_bf16_element_changes_the_digest(small_chunks: None, index: int) -> None:
    a = _inputs()
    before = check.hash_tensors(a)
    flat = a["w"].view(-1)
    flat[index] = flat[index] + 1 if flat[index] != 0 else 1.0
    assert check.hash_tensors(a) != before


def test_swapped_chunks_and_negated_rows_change_the_digest(small_chunks: None) -> None:
    a = _inputs()
    before = check.hash_tensors(a)
    words = a["w"].view(-1).view(torch.int32)
    first, second = words[:1024].clone(), words[1024:2048].clone()
    words[:1024], words[1024:2048] = second, first
    assert check.hash_tensors(a) != before
    a = _inputs()
    a["w"][3] = -a["w"][3]
    assert check.hash_tensors(a) != before


def test_large_tensors_take_the_in_place_digest_and_small_ones_the_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = check._linear_digest
    monkeypatch.setattr(check, "_linear_digest", lambda t: calls.append(t.numel()) or real(t))
    monkeypatch.setattr(check, "_DIGEST_WORDS", 1 << 16)
    big = torch.zeros(check.DEVICE_DIGEST_MIN_BYTES // 2, dtype=torch.bfloat16)
    small = torch.zeros(1000, dtype=torch.bfloat16)
    before = check.hash_tensors({"big": big, "small": small})
    assert calls == [big.numel()]
    big[-1] = 1.0
    assert check.hash_tensors({"big": big, "small": small}) != before


# Weights of 16 MiB (bf16): over DEVICE_DIGEST_MIN_BYTES, so the sandboxed child digests them in place.
LARGE = Shape("dense_gemm", "large", {"N": 4096, "K": 2048})
# A fixed number of input sets: left to the host, the bench rotates sets past 2x the LLC, and on a CPU with a
# 480 MiB L3 that is 61 sets of 16 MiB, each digested before and after the bench (~45 s of the 60 s limit).
FOUR_SETS = QUICK_BENCH.model_copy(update={"input_sets": 4})


def test_large_inputs_in_a_real_child_honest_passes_and_one_written_weight_is_caught(data_dir: Path) -> None:
    assert LARGE.dims["N"] * LARGE.dims["K"] * 2 >= check.DEVICE_DIGEST_MIN_BYTES
    honest = run_source(SHIPPED, data_dir, shape=LARGE, m=2, declares_library=True, bench=FOUR_SETS)
    assert honest.verdict == Verdict.passed, honest.reason  # the digest path trips neither check nor tamper guard
    cheat = run_cheat("writes_one_weight", data_dir, shape=LARGE, m=2, bench=FOUR_SETS)
    assert (cheat.verdict, cheat.reason_code) == (Verdict.rejected, "wrote_inputs"), cheat.reason
