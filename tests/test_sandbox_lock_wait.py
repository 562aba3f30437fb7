"""A run's wall-clock limit counts its own time, not the time it waits for the device behind other
runs (session H on the H200: CuTe runs queued behind slow MoE runs were given `timeout` verdicts);
the extension is capped, so a run cannot buy itself unlimited time."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from evaluation_helpers import DEVICE, SHIPPED, run_source
from workers.gpu_lock import DeviceLock, lock_dir
from workers.protocol import BenchSettings, Verdict
from workers.sandbox import LOCK_WAIT_CAP

QUICK = BenchSettings(min_rounds=5, min_time_s=0.05)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("kt-data")
    run_source(SHIPPED, d, m=1, bench=QUICK)  # bandwidth cached: the runs below time only themselves
    return d


def _hold_device(data_dir: Path, seconds: float) -> threading.Thread:
    """Another run's timed phase: the device held exclusively for ``seconds``."""
    held = threading.Event()

    def hold() -> None:
        with DeviceLock(lock_dir(data_dir, DEVICE)).exclusive():
            held.set()
            time.sleep(seconds)

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    assert held.wait(10)
    return t


def test_time_queued_for_the_device_does_not_count_against_the_limit(data_dir: Path) -> None:
    holder = _hold_device(data_dir, 9.0)
    r = run_source(SHIPPED, data_dir, m=2, bench=QUICK, timeout_s=6)
    holder.join()
    assert r.verdict == Verdict.passed, r.reason
    assert 6 < r.sandbox.lock_wait_s < 12, r.sandbox.lock_wait_s
    assert r.child_wall_s > 6  # past its own limit in wall time, and rightly not a timeout


def test_the_extension_is_capped(data_dir: Path) -> None:
    timeout = 2.0
    holder = _hold_device(data_dir, timeout * (1 + LOCK_WAIT_CAP) + 6)
    t0 = time.monotonic()
    r = run_source(SHIPPED, data_dir, m=2, bench=QUICK, timeout_s=timeout)
    elapsed = time.monotonic() - t0
    assert (r.verdict, r.reason_code) == (Verdict.timeout, "wall_clock_limit")
    assert "waiting for the device" in r.reason, r.reason
    assert timeout * (1 + LOCK_WAIT_CAP) - 0.5 < elapsed < timeout * (1 + LOCK_WAIT_CAP) + 5, elapsed
    holder.join()
