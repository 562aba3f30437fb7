"""Shared by the harness and cheat tests: evaluate a variant source in a real sandboxed child."""

from __future__ import annotations

import os
from pathlib import Path

from kernels.backends.base import source_hash
from kernels.slots.base import Shape
from workers.protocol import BenchSettings, ControlSpec, RunResult, RunSpec
from workers.sandbox import evaluate

CHEATS = Path(__file__).parent / "cheats"
REPO = Path(__file__).resolve().parents[1]
# The shipped torch dense_gemm variant (a cuBLAS call): the honest reference run of many tests.
SHIPPED = (REPO / "kernels/variants/torch/dense_gemm_matmul.py").read_text()
DEVICE = os.environ.get("KT_TEST_DEVICE", "cpu")
SMALL = Shape("dense_gemm", "t", {"N": 256, "K": 512})
# Few rounds: these tests are about verdicts; the numbers are exercised by the honest-variant test.
QUICK_BENCH = BenchSettings(min_rounds=6, max_rounds=40, min_time_s=0.0)
# Triton's interpreter runs one program at a time (a call of a small GEMV grid takes a second or two): the
# fewest rounds and sets the protocol allows, for the tests that prove a variant passes the real pipeline.
INTERPRETED_BENCH = BenchSettings(warmup=0, min_rounds=3, max_rounds=3, min_time_s=0.0, input_sets=2)


def run_source(source: str, data_dir: Path, *, language: str = "torch", m: int = 4, timeout_s: float = 60,
               bench: BenchSettings = QUICK_BENCH, declares_library: bool = False, seed: int = 7,
               memory_limit_mb: int = 8192, shape: Shape = SMALL, config: dict | None = None,
               device: str = DEVICE, control: ControlSpec | None = None) -> RunResult:
    config = dict(config or {})
    run_id = f"test-{source_hash(source)[:8]}-m{m}-{source_hash(repr(sorted(config.items())))[:6]}"
    spec = RunSpec(run_id=run_id, slot=shape.slot, language=language, source=source,
                   source_hash=source_hash(source), config=config, shape=shape.to_json(), m=m, device=device,
                   seed=seed, bench=bench, timeout_s=timeout_s, declares_library=declares_library,
                   memory_limit_mb=memory_limit_mb, control=control)
    result = evaluate(spec, data_dir=data_dir)
    # Every verdict must survive the trip to the DB and back.
    assert RunResult.model_validate_json(result.model_dump_json()) == result
    return result


def run_cheat(name: str, data_dir: Path, **kwargs) -> RunResult:
    return run_source((CHEATS / f"{name}.py").read_text(), data_dir, **kwargs)
