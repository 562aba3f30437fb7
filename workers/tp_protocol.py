"""What crosses process boundaries in a TP evaluation (workers/tp_group.py).

The variant, config, shape, M, seed and limits travel in the ordinary RunSpec; a TP run adds the
world size and the device kind (rank r uses ``cuda:r`` or the CPU). The verdict is a RunResult
(same verdicts, same compile and check stages, so the lead can store it as a run) extended with
per-rank reports, the group timing and the cross-rank agreement.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from workers.protocol import RunResult, RunSpec, Trial, Verdict

MAX_WORLD = 64


class TPRunSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run: RunSpec
    world_size: int = Field(ge=1, le=MAX_WORLD)
    device: Literal["cpu", "cuda"] = "cpu"


class RankReport(BaseModel):
    """One rank's own account, plus what the parent saw of its process."""

    rank: int
    pid: int | None = None
    verdict: Verdict | None = None   # None: the rank never reported (crashed, hung, killed)
    reason_code: str = ""
    reason: str = ""
    peer_error: bool = False         # it failed because another rank went away (not the culprit)
    exit_code: int | None = None
    signal: str | None = None
    wall_s: float | None = None
    log_tail: str = ""


class TPBenchStage(BaseModel):
    """Group timings: per round, the slowest rank's time (the layer waits for the last rank)."""

    timer: str
    world_size: int
    seed: int
    rounds: int
    input_sets: int
    set_bytes: int = Field(description="bytes one rank's call must move (its shard)")
    comm_bytes: int = Field(description="bytes one rank contributes to the stock path's collectives")
    median_us: float
    p10_us: float
    p90_us: float
    cv: float
    baseline_median_us: float
    baseline_p10_us: float
    baseline_p90_us: float
    baseline_cv: float
    speedup: float
    speedup_ci_lo: float
    speedup_ci_hi: float
    rank_medians_us: list[float] = Field(default_factory=list, description="variant median per rank")
    replicated_median_us: float | None = Field(default=None, description="no-collective baseline (router: "
                                                                         "the replicated gate, vLLM today)")
    speedup_vs_replicated: float | None = None


class TPRunResult(RunResult):
    world_size: int
    tp_slot: str = ""
    backend: str = ""                       # gloo | nccl
    cross_rank_identical: bool | None = None
    stock_check: Trial | None = None        # the TP stock path checked like a variant (harness sanity)
    tp_bench: TPBenchStage | None = None
    ranks: list[RankReport] = Field(default_factory=list)
    group_pgid: int | None = Field(default=None, description="the launcher's process group, killed whole at the end")
