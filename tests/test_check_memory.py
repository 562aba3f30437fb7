"""A check that runs out of device memory beside other runs' checks (workers/pipeline.py check_beside_others): on an
H100 with twelve workers, moe_experts checks holding 4 GB of expert weights each ran the card out of its 80 GB, and
the runs ended as harness errors. Now such a check runs once more with the device to itself; any other failure, and
a second running-out, end the run as before."""

from __future__ import annotations

import gc
import weakref
from contextlib import contextmanager
from typing import Iterator

import pytest
import torch

from workers.failures import Failure, call_kernel, device_out_of_memory
import workers.pipeline
from workers.pipeline import check_beside_others
from workers.protocol import Verdict

CUBLAS = RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")


class RecordingLock:
    """The DeviceLock's two modes, recording which one each attempt ran under."""

    def __init__(self) -> None:
        self.modes: list[str] = []
        self.events: list[str] = []  # "+mode", "-mode" and what the test adds between them

    @contextmanager
    def _hold(self, mode: str) -> Iterator[None]:
        self.modes.append(mode)
        self.events.append("+" + mode)
        try:
            yield
        finally:
            self.events.append("-" + mode)

    def shared(self):
        return self._hold("shared")

    def exclusive(self):
        return self._hold("exclusive")


def failing(*errors: BaseException):
    """A check that raises ``errors`` in turn, then passes; it records how many times it ran."""
    calls = []

    def check() -> None:
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
    return check, calls


def variant_crash(exc: Exception) -> Failure:
    """What call_kernel makes of an exception raised inside the variant's call."""
    def fn(**_: torch.Tensor) -> None:
        raise exc
    with pytest.raises(Failure) as info:
        call_kernel(fn, {}, {}, torch.device("cpu"), "variant.py")
    return info.value


def test_what_counts_as_the_device_running_out() -> None:
    assert device_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.62 GiB"))
    assert device_out_of_memory(CUBLAS)
    wrapped = variant_crash(torch.OutOfMemoryError("CUDA out of memory"))
    assert wrapped.verdict == Verdict.crashed and device_out_of_memory(wrapped)
    assert not device_out_of_memory(variant_crash(IndexError("index 9 is out of bounds")))
    assert not device_out_of_memory(Failure(Verdict.check_failed, "mismatch", "out: 12 of 4096 elements differ"))
    assert not device_out_of_memory(MemoryError())  # the host's, not the device's


@pytest.mark.parametrize("oom", [torch.OutOfMemoryError("CUDA out of memory"), CUBLAS,
                                 variant_crash(torch.OutOfMemoryError("CUDA out of memory"))],
                         ids=["torch", "cublas", "inside-the-variant"])
def test_a_check_that_runs_out_beside_others_runs_again_alone(oom: BaseException) -> None:
    lock, (check, calls) = RecordingLock(), failing(oom)
    check_beside_others(lock, torch.device("cpu"), check)
    assert lock.modes == ["shared", "exclusive"] and len(calls) == 2


def test_a_check_that_passes_or_fails_on_its_own_runs_once() -> None:
    lock, (check, calls) = RecordingLock(), failing()
    check_beside_others(lock, torch.device("cpu"), check)
    assert lock.modes == ["shared"] and len(calls) == 1
    mismatch = Failure(Verdict.check_failed, "mismatch", "out: 12 of 4096 elements differ")
    lock, (check, calls) = RecordingLock(), failing(mismatch)
    with pytest.raises(Failure) as info:
        check_beside_others(lock, torch.device("cpu"), check)
    assert info.value is mismatch and lock.modes == ["shared"] and len(calls) == 1


def test_running_out_with_the_device_to_itself_ends_the_run() -> None:
    """No third try: the second running-out is the run's outcome (a harness error, or the variant's crash)."""
    lock, (check, calls) = RecordingLock(), failing(CUBLAS, torch.OutOfMemoryError("CUDA out of memory"))
    with pytest.raises(torch.OutOfMemoryError):
        check_beside_others(lock, torch.device("cpu"), check)
    assert lock.modes == ["shared", "exclusive"] and len(calls) == 2


def test_the_failed_attempt_lets_go_of_its_inputs_before_the_device_memory_is_released(monkeypatch) -> None:
    """The first attempt's exception holds its frames, and they its inputs (GBs of expert weights): the release that
    precedes the second attempt must come after that exception is gone, or it frees nothing."""
    class Inputs:
        pass
    held: list[weakref.ref] = []

    def check() -> None:
        if not held:
            inputs = Inputs()  # a local of the failing frame, as a check's tensors are
            held.append(weakref.ref(inputs))
            raise torch.OutOfMemoryError("CUDA out of memory")

    gone_at_release: list[bool] = []

    def release(device: torch.device) -> None:
        gc.collect()
        gone_at_release.append(held[0]() is None)
    monkeypatch.setattr(workers.pipeline, "release_device_memory", release)
    check_beside_others(RecordingLock(), torch.device("cpu"), check)
    assert gone_at_release == [True, True]  # before the second attempt, and after it


@pytest.mark.parametrize("errors,events", [
    ((), ["+shared", "release", "-shared"]),
    ((CUBLAS,), ["+shared", "release", "-shared", "+exclusive", "release", "-exclusive"]),
    ((Failure(Verdict.check_failed, "mismatch", "out: 12 of 4096 elements differ"),),
     ["+shared", "release", "-shared"]),
], ids=["passes", "runs-out-then-passes", "fails"])
def test_each_attempt_hands_its_memory_back_before_it_lets_go_of_the_lock(monkeypatch, errors, events) -> None:
    """H100 session 24 call C: a retry with the device to itself ran out beside five runs that had finished their
    checks and unlocked but not yet released their cached blocks (14.5 GB each). The release comes inside the lock,
    with the failed attempt's inputs already gone."""
    class Inputs:
        pass
    lock, held, gone = RecordingLock(), [], []

    def check() -> None:
        inputs = Inputs()  # a local of the check's frame, as its tensors are
        held.append(weakref.ref(inputs))
        if len(held) <= len(errors):
            raise errors[len(held) - 1]

    def release(device: torch.device) -> None:
        gc.collect()
        gone.append(all(r() is None for r in held))
        lock.events.append("release")
    monkeypatch.setattr(workers.pipeline, "release_device_memory", release)
    try:
        check_beside_others(lock, torch.device("cpu"), check)
    except Failure:
        pass
    assert lock.events == events and all(gone)


def test_a_failed_check_keeps_its_report_when_its_frames_are_dropped() -> None:
    """drop_frames frees the locals, not the file and line a report prints."""
    import traceback

    def inner() -> None:
        big = torch.zeros(4)  # noqa: F841 - the local that must go
        raise ValueError("wrong")
    try:
        try:
            inner()
        except ValueError as e:
            raise Failure(Verdict.check_failed, "mismatch", "wrapped") from e
    except Failure as exc:
        workers.pipeline.drop_frames(exc)
        tb = exc.__cause__.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        assert tb.tb_frame.f_locals == {}
        text = "".join(traceback.format_exception(exc))
        assert "in inner" in text and 'raise ValueError("wrong")' in text
