"""The device lock lets runs compile and check side by side but never times two at once."""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

from workers.gpu_lock import DeviceLock, lock_dir


def _hold(directory: str, mode: str, seconds: float, start_at: float, q: "mp.Queue[tuple[str, float, float]]") -> None:
    time.sleep(max(0.0, start_at - time.time()))
    lock = DeviceLock(directory)
    with getattr(lock, mode)():
        t0 = time.time()
        time.sleep(seconds)
        q.put((mode, t0, time.time()))


def _intervals(directory: Path, modes: list[tuple[str, float]]) -> list[tuple[str, float, float]]:
    ctx = mp.get_context("fork")
    q: "mp.Queue[tuple[str, float, float]]" = ctx.Queue()
    base = time.time() + 0.3
    procs = [ctx.Process(target=_hold, args=(str(directory), mode, 0.4, base + delay, q)) for mode, delay in modes]
    for p in procs:
        p.start()
    for p in procs:
        p.join(20)
        assert p.exitcode == 0
    return sorted(q.get(timeout=5) for _ in procs)


def _overlap(a: tuple[str, float, float], b: tuple[str, float, float]) -> bool:
    return a[1] < b[2] and b[1] < a[2]


def test_exclusive_never_overlaps_anything(tmp_path: Path) -> None:
    d = lock_dir(tmp_path, "cuda:0")
    got = _intervals(d, [("shared", 0.0), ("exclusive", 0.1), ("shared", 0.2), ("exclusive", 0.25)])
    for i, a in enumerate(got):
        for b in got[i + 1:]:
            if "exclusive" in (a[0], b[0]):
                assert not _overlap(a, b), got


def test_shared_holders_run_side_by_side(tmp_path: Path) -> None:
    got = _intervals(lock_dir(tmp_path, "cuda:0"), [("shared", 0.0), ("shared", 0.05), ("shared", 0.1)])
    assert _overlap(got[0], got[1]) and _overlap(got[1], got[2]), got


def test_a_waiting_writer_is_not_starved_by_new_readers(tmp_path: Path) -> None:
    # reader 1 holds; the writer queues at 0.1; reader 2 arrives at 0.2 and must wait for the writer
    got = _intervals(lock_dir(tmp_path, "cuda:0"), [("shared", 0.0), ("exclusive", 0.1), ("shared", 0.2)])
    writer = next(g for g in got if g[0] == "exclusive")
    late_reader = max((g for g in got if g[0] == "shared"), key=lambda g: g[1])
    assert late_reader[1] >= writer[2] - 1e-3, got


def test_no_directory_means_no_locking() -> None:
    lock = DeviceLock(None)
    with lock.exclusive(), lock.exclusive():  # would deadlock if it locked
        pass


def test_the_wait_log_records_time_spent_queued_and_a_wait_in_progress(tmp_path: Path) -> None:
    from workers.gpu_lock import read_wait_log

    d = lock_dir(tmp_path, "cuda:0")
    log = tmp_path / "wait"
    holder, waiter = DeviceLock(d), DeviceLock(d, wait_log=log)
    assert read_wait_log(log) == 0.0
    with waiter.shared():  # free: no measurable wait
        pass
    assert read_wait_log(log) < 0.3  # three flock calls; generous for a loaded CI machine, far below the 0.6 s wait below
    ctx = mp.get_context("fork")
    with holder.exclusive():
        p = ctx.Process(target=lambda: waiter.shared().__enter__())
        p.start()
        time.sleep(0.6)
        in_progress = read_wait_log(log)  # the child is still blocked: counted up to now
        assert 0.4 < in_progress < 5, in_progress
    p.join(5)
    assert p.exitcode == 0
    done = read_wait_log(log)  # finished waiting: the total stops growing
    time.sleep(0.2)
    assert done == read_wait_log(log) and done >= in_progress


def test_an_unreadable_or_forged_log_counts_as_no_wait(tmp_path: Path) -> None:
    from workers.gpu_lock import read_wait_log

    assert read_wait_log(tmp_path / "missing") == 0.0
    (tmp_path / "junk").write_text("lots of time")
    assert read_wait_log(tmp_path / "junk") == 0.0
