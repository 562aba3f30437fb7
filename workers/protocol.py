"""The data that crosses process boundaries: what to evaluate (RunSpec) and the verdict (RunResult).

Both are plain pydantic models: JSON in, JSON out, validated at each edge (worker -> child -> worker -> DB).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Verdict(StrEnum):
    passed = "passed"                # compiled, checked at this M, benchmarked
    compiled = "compiled"            # compile-only: this device cannot run the language (waits for a GPU queue)
    compile_failed = "compile_failed"
    check_failed = "check_failed"
    rejected = "rejected"            # a cheat or harness tampering was detected
    crashed = "crashed"              # the variant killed the child (signal, exit, exception while running)
    timeout = "timeout"              # wall-clock limit
    error = "error"                  # a fault of the harness itself, never the variant's


class BenchSettings(BaseModel):
    """Kept small by default so a CPU run of q_b_proj at M=64 takes a second or two."""

    model_config = ConfigDict(extra="forbid")
    warmup: int = Field(default=1, ge=0, description="untimed rounds before timing")
    min_rounds: int = Field(default=10, ge=3, description="timed rounds (one sample per implementation each)")
    max_rounds: int = Field(default=200, ge=3)
    min_time_s: float = Field(default=0.2, ge=0, description="keep timing until this much time has passed")
    input_sets: int | None = Field(default=None, ge=1, description="rotating input sets; None: enough to exceed 2x the LLC")
    max_input_sets: int = Field(default=256, ge=1)
    cpu_threads: int = Field(default=1, ge=1, description="torch.set_num_threads in the child, fixed and recorded")
    graph_calls: int | None = Field(default=None, ge=1, description="CUDA: calls captured per graph (default: whole passes over the sets, at least 32 calls)")
    bootstrap: int = Field(default=2000, ge=100, description="bootstrap resamples for the speedup CI")


class ControlSpec(BaseModel):
    """The bucket's incumbent (its winning run's variant and config), timed beside the variant in the same
    child so that a challenger is ranked against it head to head, not against a median from another session
    (workers/bench.py)."""

    model_config = ConfigDict(extra="forbid")
    run_id: str = Field(description="the winning run whose variant and config this is")
    language: Literal["torch", "triton", "cute"]
    source: str
    source_hash: str
    config: dict[str, Any] = Field(default_factory=dict)
    declares_library: bool = False


class RunSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run_id: str
    slot: str
    language: Literal["torch", "triton", "cute"]
    source: str
    source_hash: str
    config: dict[str, Any] = Field(default_factory=dict)
    shape: dict[str, Any] = Field(description="Shape.to_json()")
    m: int = Field(ge=1)
    device: str = Field(default="cpu", pattern=r"^(cpu|cuda(:\d+)?)$")
    seed: int = Field(default=0, ge=0, description="base seed; per-trial seeds are derived and recorded")
    check_trials: int = Field(default=2, ge=2)
    bench: BenchSettings = Field(default_factory=BenchSettings)
    timeout_s: float = Field(default=300.0, gt=0)
    memory_limit_mb: int = Field(default=8192, ge=512, description="RLIMIT_AS, CPU devices only")
    declares_library: bool = False
    control: ControlSpec | None = Field(default=None, description="the bucket's incumbent, timed beside the variant")


class CompileStage(BaseModel):
    ok: bool
    seconds: float = 0.0
    cache_hit: bool = False
    log: str = ""
    line: int | None = None
    backend: str = ""


class Trial(BaseModel):
    kind: str = Field(description="fresh | fresh_again | same_buffers_new_values | same_buffers_partial | timed[N sets]")
    seed: int
    passed: bool
    rel_l2: float | None = None
    max_abs_err: float | None = None


class CheckStage(BaseModel):
    passed: bool
    seconds: float = 0.0
    trials: list[Trial] = Field(default_factory=list)
    mismatches: list[dict[str, Any]] = Field(default_factory=list)
    library_ops: list[str] = Field(default_factory=list, description="library GEMM ops seen under the profiler")


class BenchStage(BaseModel):
    timer: str
    baseline_timer: str | None = None  # "eager" when the stock could not be graph-captured
    seconds: float = 0.0
    threads: int | None = None
    seed: int
    input_sets: int
    set_bytes: int
    llc_bytes: int
    median_us: float
    p10_us: float
    p90_us: float
    cv: float
    n: int
    baseline_median_us: float
    baseline_p10_us: float
    baseline_p90_us: float
    baseline_cv: float
    speedup: float
    speedup_ci_lo: float
    speedup_ci_hi: float
    floor_us: float
    frac_of_floor: float
    bytes_moved: int
    bandwidth_gbs: float
    # The incumbent timed in the same interleaved rounds (RunSpec.control); control_error when it could not be.
    control_run_id: str | None = None
    control_median_us: float | None = None
    vs_control: float | None = Field(default=None, description="control median / variant median (> 1: the variant is faster)")
    vs_control_ci_lo: float | None = None
    vs_control_ci_hi: float | None = None
    control_error: str | None = None


class SandboxInfo(BaseModel):
    network_isolated: bool = False
    exit_code: int | None = None
    signal: str | None = None
    limits: dict[str, int] = Field(default_factory=dict)
    lock_wait_s: float = Field(default=0.0, description="time the child waited for the device lock (not counted against its limit)")
    stdout: str = ""
    stderr: str = ""


class StageResults(BaseModel):
    """What the child measured: one entry per stage that ran."""

    compile: CompileStage | None = None
    check: CheckStage | None = None
    bench: BenchStage | None = None


class RunResult(StageResults):
    run_id: str
    verdict: Verdict
    reason_code: str = ""
    reason: str = ""
    fingerprint: dict[str, Any] = Field(default_factory=dict)
    uses_library: bool = False
    started_at: datetime
    finished_at: datetime | None = None
    child_wall_s: float | None = None
    sandbox: SandboxInfo = Field(default_factory=SandboxInfo)
    bandwidth_measured: bool = Field(default=False, description="the child measured bandwidth: cache it")
