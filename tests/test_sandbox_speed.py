"""The zygote fast path (workers/zygote.py): children are forks of one template process, nothing a
variant does reaches the next run, a dead zygote is replaced, and KT_SANDBOX_MODE=spawn still works.
Speed itself is measured by bench/sandbox_overhead.py, not asserted here."""

from __future__ import annotations

import os
import signal

import pytest

from evaluation_helpers import SHIPPED, run_source
from workers import sandbox
from workers.protocol import Verdict


POLLUTE = """
import os, sys, types, torch, numpy
sys.modules["kt_leaked_module"] = types.ModuleType("kt_leaked_module")
torch.kt_leaked_attr = 1
os.environ["KT_LEAKED_ENV"] = "1"
open("kt_leaked_file", "w").write("x")
numpy.random.seed(1234)
""" + SHIPPED

CHECK_CLEAN = """
import os, sys, torch, numpy
leaks = [name for name, found in (("module", "kt_leaked_module" in sys.modules),
         ("torch attribute", hasattr(torch, "kt_leaked_attr")), ("env", "KT_LEAKED_ENV" in os.environ),
         ("file", os.path.exists("kt_leaked_file")),
         ("numpy seed", numpy.random.get_state()[1][0] == numpy.random.RandomState(1234).get_state()[1][0]))
         if found]
if leaks:
    raise RuntimeError("state leaked from an earlier run: " + ", ".join(leaks))
""" + SHIPPED

# Kills its parent through ctypes (the audit hook cannot see that); only when the parent is the zygote.
KILLS_ZYGOTE = """
import ctypes, os, signal
if os.getppid() != ZYGOTE_PID:
    raise RuntimeError("not forked from the zygote: refusing to kill the parent")
ctypes.CDLL(None).kill(os.getppid(), signal.SIGKILL)
""" + SHIPPED


@pytest.fixture(autouse=True)
def zygote_mode(monkeypatch):
    monkeypatch.setenv("KT_SANDBOX_MODE", "zygote")


def test_children_are_forks_of_one_fork_safe_zygote_and_leave_no_state(data_dir):
    first = run_source(POLLUTE, data_dir)
    assert first.verdict == Verdict.passed, first.reason
    pid = sandbox.zygote_pid()
    assert pid is not None and first.sandbox.limits[sandbox.MODE_KEY] == 1
    # Fork safety, seen from outside: one thread, no CUDA context.
    assert len(os.listdir(f"/proc/{pid}/task")) == 1
    assert sandbox._zygote.hello["threads"] == 1 and not sandbox._zygote.hello["cuda_initialized"]
    second = run_source(CHECK_CLEAN, data_dir)
    assert second.verdict == Verdict.passed, second.reason
    assert second.sandbox.limits[sandbox.MODE_KEY] == 1 and sandbox.zygote_pid() == pid


def test_dead_zygote_is_replaced_transparently(data_dir):
    assert run_source(SHIPPED, data_dir, seed=1).verdict == Verdict.passed
    old = sandbox.zygote_pid()
    os.kill(old, signal.SIGKILL)
    r = run_source(SHIPPED, data_dir, seed=2)
    assert r.verdict == Verdict.passed, r.reason
    assert r.sandbox.limits[sandbox.MODE_KEY] == 1 and sandbox.zygote_pid() not in (None, old)


def test_variant_killing_the_zygote_is_a_crash_and_the_next_run_works(data_dir):
    assert run_source(SHIPPED, data_dir, seed=3).verdict == Verdict.passed
    old = sandbox.zygote_pid()
    r = run_source(KILLS_ZYGOTE.replace("ZYGOTE_PID", str(old)), data_dir)
    assert (r.verdict, r.reason_code) == (Verdict.crashed, "sandbox_lost"), r.reason
    nxt = run_source(SHIPPED, data_dir, seed=4)
    assert nxt.verdict == Verdict.passed and sandbox.zygote_pid() not in (None, old)


def test_spawn_mode_runs_a_fresh_interpreter(data_dir, monkeypatch):
    monkeypatch.setenv("KT_SANDBOX_MODE", "spawn")
    r = run_source(CHECK_CLEAN, data_dir)
    assert r.verdict == Verdict.passed, r.reason
    assert r.sandbox.limits[sandbox.MODE_KEY] == 0
