"""Each known way of cheating a kernel leaderboard (DESIGN.md) is caught with its reason code.

Real sandboxed children. Runs on the GPU too: KT_TEST_DEVICE=cuda pytest tests/test_cheats.py
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from evaluation_helpers import DEVICE, SMALL, run_cheat
from kernels.slots.base import Shape
from kernels.slots.dense_gemm import DenseGemm
from workers.bench import BenchContext, run_bench
from workers.check import CheckContext, library_calls
from workers.failures import Failure
from workers.protocol import BenchSettings, Verdict


@pytest.mark.parametrize("cheat, verdict, code", [
    ("writes_nothing", Verdict.check_failed, "unwritten_output"),
    ("nan_output", Verdict.check_failed, "nan_output"),
    ("writes_inputs", Verdict.rejected, "wrote_inputs"),
    ("cache_by_id", Verdict.rejected, "cached_output"),
    ("cache_by_data_ptr", Verdict.rejected, "cached_output"),
    ("cache_by_content", Verdict.rejected, "cached_output"),
    ("warmup_detector", Verdict.rejected, "timed_output_mismatch"),
    ("patches_perf_counter", Verdict.rejected, "timer_tampered"),
    ("patches_stats", Verdict.rejected, "timer_tampered"),
    ("patches_elapsed_time", Verdict.rejected, "timer_tampered"),
    ("patches_checker", Verdict.rejected, "harness_tampered"),
    ("slows_stock", Verdict.rejected, "harness_tampered"),
    ("spawns_process", Verdict.rejected, "forbidden_subprocess"),
])
def test_cheat_is_caught(cheat, verdict, code, data_dir):
    result = run_cheat(cheat, data_dir)
    assert (result.verdict, result.reason_code) == (verdict, code), result.reason
    assert result.bench is None or result.verdict != Verdict.passed


def test_honest_non_library_variant_passes(data_dir):
    result = run_cheat("honest_elementwise", data_dir, language="torch")
    assert result.verdict == Verdict.passed, result.reason
    assert result.check.passed and result.bench.median_us > 0


@pytest.mark.skipif(importlib.util.find_spec("kernels.backends.triton_backend") is None,
                    reason="the triton backend is not in this checkout yet")
def test_undeclared_library_call_in_triton_variant_is_rejected(data_dir):
    result = run_cheat("undeclared_library", data_dir, language="triton")
    assert (result.verdict, result.reason_code) == (Verdict.rejected, "undeclared_library_call"), result.reason
    declared = run_cheat("undeclared_library", data_dir, language="triton", declares_library=True)
    assert declared.reason_code != "undeclared_library_call" and declared.uses_library


def _context(fn) -> tuple[CheckContext, dict, dict]:
    slot, device = DenseGemm(), torch.device(DEVICE)
    ctx = CheckContext(slot, SMALL, 4, device, fn, "<none>", verify=lambda: None, profile_library=True)
    return ctx, slot.make_inputs(SMALL, 4, 1, device), slot.alloc_outputs(SMALL, 4, device)


def test_profiler_sees_library_gemm_and_not_elementwise_work():
    """The detector behind undeclared_library_call, in process (any language backend may use it)."""
    def via_matmul(x, w, out):
        torch.matmul(x, w.t(), out=out)

    def elementwise(x, w, out):
        out.copy_((x.float()[:, None, :] * w.float()[None, :, :]).sum(-1))

    assert "aten::mm" in library_calls(*_context(via_matmul))
    assert library_calls(*_context(elementwise)) == []


def test_time_below_the_bandwidth_floor_is_implausible():
    """A measured bandwidth far too low puts the floor above an honest time: the rule must fire;
    with a generous bandwidth the same honest variant passes."""
    slot, device = DenseGemm(), torch.device(DEVICE)

    def ctx(bandwidth_gbs: float) -> BenchContext:
        return BenchContext(slot, SMALL, 4, device, slot.stock(SMALL, 4), BenchSettings(min_rounds=4, min_time_s=0,
                            input_sets=4), seed=3, bandwidth_gbs=bandwidth_gbs, verify=lambda: None)

    with pytest.raises(Failure) as failure:
        run_bench(ctx(1e-4))
    assert failure.value.reason_code == "implausible_timing"
    stage, timed = run_bench(ctx(1e6))
    assert timed.passed and stage.frac_of_floor < 1


@pytest.mark.parametrize("cheat,shape", [
    ("chained_reads_early", SMALL),
    # mla_norms_gemm has two activations (x, kv): its cheat reads x after the wait and kv before it
    ("chained_reads_second_early", Shape("mla_norms_gemm", "t", {"N": 64, "K": 512, "KV": 96, "eps": 1e-6}))])
def test_a_chained_build_that_reads_its_activations_early_is_caught(data_dir, cheat, shape):
    """build(..., pdl=1) is what the exported dispatch(..., pdl=1) ships, so the check stage runs it too, behind a
    producer that writes its activations late (workers/chain.py). Here its chained form reads one of them before
    griddepcontrol.wait."""
    result = run_cheat(cheat, data_dir, language="triton", shape=shape)
    if DEVICE == "cuda" and torch.cuda.get_device_capability()[0] >= 9:
        assert (result.verdict, result.reason_code) == (Verdict.check_failed, "chained_mismatch"), result.reason
        assert [t.kind for t in result.check.trials if not t.passed] == ["chained"]
        assert all(t.passed for t in result.check.trials if t.kind != "chained")
    else:  # no programmatic dependent launch here: its plain form is right, and no chained trial runs
        assert result.verdict == Verdict.passed, result.reason
        assert not any(t.kind == "chained" for t in result.check.trials)
