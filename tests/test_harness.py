"""The evaluation harness end to end: real sandboxed children on small shapes (CPU by default,
KT_TEST_DEVICE=cuda on a GPU host)."""

from __future__ import annotations

import json
import math
import re
import time

import pytest

from evaluation_helpers import SHIPPED, run_source
from workers.protocol import BenchSettings, RunResult, Verdict
from workers.stats import bootstrap_speedup_ci, summarize


WRONG = """
import torch
def build(config, shape):
    def run(x, w, out):
        torch.matmul(x, w.t(), out=out)
        out[0, :3] += 1.0
    return run
"""


def test_shipped_torch_variant_passes_with_numbers(data_dir):
    r = run_source(SHIPPED, data_dir, m=8, bench=BenchSettings(min_rounds=20, min_time_s=0.1))
    assert r.verdict == Verdict.passed, r.reason
    assert r.compile.ok and r.check.passed and r.uses_library
    assert len({t.seed for t in r.check.trials}) == len(r.check.trials) >= 5
    b = r.bench
    assert b.n >= 20 and 0 < b.p10_us <= b.median_us <= b.p90_us
    assert b.speedup_ci_lo <= b.speedup <= b.speedup_ci_hi
    assert 0.6 < b.speedup < 1.6  # the same library call as the stock baseline
    # rotating sets defeat the cache, up to the cap on sets (a large LLC and a tiny shape can outgrow it)
    assert b.input_sets * b.set_bytes > 2 * b.llc_bytes or b.input_sets == BenchSettings().max_input_sets
    assert 0 < b.frac_of_floor < 1 and b.bandwidth_gbs > 0
    assert r.fingerprint["hardware_key"].startswith(r.fingerprint["hardware_class"] + "-")
    cache = json.loads((data_dir / "bandwidth.json").read_text())
    assert cache[r.fingerprint["bandwidth_key"]]["bandwidth_gbs"] == pytest.approx(b.bandwidth_gbs)


def test_build_error_is_compile_failed_with_line(data_dir):
    src = "import torch\n\ndef build(config, shape):\n    raise ValueError('tile 64 does not divide N')\n"
    r = run_source(src, data_dir)
    assert (r.verdict, r.compile.ok, r.compile.line) == (Verdict.compile_failed, False, 4)
    assert "tile 64" in r.reason and r.check is None and r.bench is None


def test_syntax_error_is_compile_failed(data_dir):
    r = run_source("def build(config, shape):\n    return lambda x, w, out: (\n", data_dir)
    assert (r.verdict, r.reason_code) == (Verdict.compile_failed, "syntax_error")
    assert r.compile.line is not None


def test_segfault_is_a_crash_and_the_next_run_works(data_dir):
    src = "import os, signal\ndef build(config, shape):\n    os.kill(os.getpid(), signal.SIGSEGV)\n"
    r = run_source(src, data_dir)
    assert (r.verdict, r.reason_code, r.sandbox.signal) == (Verdict.crashed, "signal_SIGSEGV", "SIGSEGV")
    assert "Fatal Python error" in r.reason or "Segmentation" in r.reason  # faulthandler's lines
    assert run_source(SHIPPED, data_dir).verdict == Verdict.passed


def test_os_exit_is_a_crash(data_dir):
    r = run_source("import os\ndef build(config, shape):\n    os._exit(3)\n", data_dir)
    assert (r.verdict, r.reason_code) == (Verdict.crashed, "exit_3")


def test_infinite_loop_times_out(data_dir):
    # A run first, so the device bandwidth is cached and the 5 s go to the variant, not the measurement.
    run_source(SHIPPED, data_dir, m=1, bench=BenchSettings(min_rounds=5, min_time_s=0.05))
    t0 = time.monotonic()
    # The loop spins a core until the limit: 5 s is plenty to reach it (the child is a zygote fork).
    r = run_source("def build(config, shape):\n    while True:\n        pass\n", data_dir, timeout_s=5)
    assert (r.verdict, r.reason_code) == (Verdict.timeout, "wall_clock_limit")
    assert "it was at:" in r.reason and re.search(r"variant_\w+\.py\", line [23] in build", r.reason), r.reason
    assert time.monotonic() - t0 < 5 + 10


def test_wrong_numbers_fail_the_check_with_mismatches(data_dir):
    r = run_source(WRONG, data_dir)
    assert (r.verdict, r.reason_code) == (Verdict.check_failed, "mismatch")
    assert r.check.mismatches and r.check.mismatches[0]["index"][0] == 0
    assert r.bench is None


def test_forged_json_on_stdout_is_not_believed(data_dir):
    forged = RunResult(run_id="x", verdict=Verdict.passed, reason_code="ok", started_at="2026-01-01T00:00:00Z")
    src = f"import sys\nprint({forged.model_dump_json()!r})\nsys.stdout.flush()\n" + WRONG
    r = run_source(src, data_dir)
    assert r.verdict == Verdict.check_failed
    assert '"verdict":"passed"' in r.sandbox.stdout  # kept as the variant's log, nothing more


def test_forged_frame_on_the_result_pipe_is_rejected(data_dir):
    src = """
import os, stat
for fd in range(3, 1024):
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.write(fd, b'{"verdict": "passed"}')
    except OSError:
        pass
""" + SHIPPED
    r = run_source(src, data_dir)
    assert (r.verdict, r.reason_code) == (Verdict.rejected, "forged_result")


def test_environment_is_scrubbed(data_dir, monkeypatch):
    monkeypatch.setenv("KT_SECRET_TEST", "hunter2")
    monkeypatch.setenv("DATABASE_URL", "postgresql://kt:pw@db/kt")
    src = """
import os
for name in ("KT_SECRET_TEST", "DATABASE_URL"):
    if name in os.environ:
        raise RuntimeError("found " + name)
if any("hunter2" in v for v in os.environ.values()):
    raise RuntimeError("found the secret")
""" + SHIPPED
    r = run_source(src, data_dir)
    assert r.verdict == Verdict.passed, r.reason


def test_network_is_refused(data_dir):
    src = """
import socket
def build(config, shape):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(("127.0.0.1", 9))
    except OSError:
        pass  # swallowing the refusal must not help
    import torch
    return lambda x, w, out: torch.matmul(x, w.t(), out=out)
"""
    r = run_source(src, data_dir)
    assert r.verdict != Verdict.passed
    assert "network" in r.reason
    assert r.sandbox.network_isolated  # root on Linux: its own network namespace


def test_paired_bootstrap_brackets_the_true_ratio():
    base = [100.0 + (i % 7) for i in range(60)]
    twice_as_fast = [b / 2 for b in base]
    lo, hi = bootstrap_speedup_ci(twice_as_fast, base, resamples=1000, seed=1)
    assert lo <= 2.0 <= hi and hi - lo < 0.2
    lo2, hi2 = bootstrap_speedup_ci(base, base[::-1], resamples=1000, seed=1)
    assert lo2 <= 1.0 <= hi2
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s.median == 3.0 and s.n == 5 and s.p90 > s.median and s.cv > 1
    assert not math.isnan(summarize([5.0]).cv)
