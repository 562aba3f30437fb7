"""bench/latency_floor.py on the CPU (Triton's interpreter, the CPU timer): the file it writes, and the
sum check that refuses a read kernel which does not read every byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "TRITON_INTERPRET": "1"}


def test_quick_run_writes_floor_best_read_and_fixed_costs(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "bench/latency_floor.py", "--device", "cpu", "--sizes", "0.02",
                          "--quick", "--out", str(tmp_path)], cwd=REPO, env=ENV, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    (js,) = tmp_path.glob("*-cpu-latency-floor.json")
    doc = json.loads(js.read_text())
    assert {"date", "device", "commit", "command", "bandwidth_gbs", "llc_bytes", "timer"} <= set(doc["header"])
    assert doc["fixed"]["empty_us"] > 0 and doc["fixed"]["touch_us"] > 0
    assert [r["mb"] for r in doc["rows"]] == [0.02]
    for r in doc["rows"]:
        best = r["best"]
        assert best["sum_ok"] and best["bytes"] <= r["mb"] * 1e6
        assert r["floor_us"] == best["bytes"] / (doc["header"]["bandwidth_gbs"] * 1e9) * 1e6
        assert r["max_fraction_of_floor"] == r["floor_us"] / best["us"]
    assert "floor / best read" in js.with_suffix(".md").read_text()


def test_a_read_kernel_that_skips_bytes_is_refused() -> None:
    code = """
import sys, torch, triton, triton.language as tl
sys.path.insert(0, "bench")
import latency_floor as lf
from workers.protocol import BenchSettings

@triton.jit
def half_read(src_ptr, out_ptr, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.load(src_ptr + pid * (BLOCK * UNROLL) + tl.arange(0, BLOCK)).to(tl.float32)  # first block only
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))

lf.read_kernel = half_read
settings = BenchSettings(warmup=0, min_rounds=3, min_time_s=0, input_sets=2)
try:
    lf.measure_size(torch.device("cpu"), 40_000, 1 << 20, settings, [(1024, 2, 4)])
except RuntimeError as exc:
    print("refused:", exc)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "refused: no read config passed its sum check" in out.stdout
