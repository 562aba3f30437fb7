"""Request and response models of the /v1 API."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from kernels.catalogue import LANGUAGES, all_slots
from kernels.deployment import Deployment

HARDWARE_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"


class Provenance(BaseModel):
    author: str = Field(min_length=1, max_length=128)
    agent: str | None = Field(default=None, max_length=128, description="agent name/model, if an agent wrote it")
    parent_id: int | None = Field(default=None, description="variant this one was derived from")
    notes: str = Field(default="", max_length=16_384)


class VariantCreate(BaseModel):
    slot: str = Field(description="slot name from GET /v1/slots")
    language: str = Field(description=f"one of {', '.join(LANGUAGES)}")
    source: str = Field(description="Python module text defining build(config, shape)")
    config_space: dict[str, Any] = Field(
        description='param -> non-empty list of values; optional "constraints": list of expressions over params',
        examples=[{"BLOCK_N": [64, 128], "SPLIT_K": [1, 2, 4], "constraints": ["BLOCK_N * SPLIT_K <= 256"]}])
    provenance: Provenance
    declares_library: bool | None = Field(
        default=None, description="calls the stock library (cuBLAS...); default: the module's USES_LIBRARY")

    @field_validator("slot")
    @classmethod
    def _known_slot(cls, v: str) -> str:
        if v not in all_slots():
            raise ValueError(f"unknown slot {v!r}; known slots: {', '.join(sorted(all_slots()))}")
        return v

    @field_validator("language")
    @classmethod
    def _known_language(cls, v: str) -> str:
        if v not in LANGUAGES:
            raise ValueError(f"unknown language {v!r}; known languages: {', '.join(LANGUAGES)}")
        return v


class VariantCreated(BaseModel):
    id: int
    content_hash: str
    created: bool = Field(description="false when the same (slot, language, source) already existed")


class VariantSummary(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: int
    content_hash: str
    slot: str
    language: str
    n_points: int
    declares_library: bool
    author: str
    agent: str | None
    parent_id: int | None
    notes: str
    created_at: datetime


class VariantDetail(VariantSummary):
    source: str
    config_space: dict[str, Any]
    constraints: list[str]


class JobCreate(BaseModel):
    variant_id: int
    deployment: Deployment = Field(default_factory=Deployment)
    hardware: str = Field(default="cpu", pattern=HARDWARE_PATTERN, description='hardware class: "cpu", "h200", "gb300", ...')
    configs: Literal["all"] | list[dict[str, Any]] = Field(
        default="all", description='"all" (whole space, constraints applied) or an explicit list of configs')
    shapes: list[str] | None = Field(default=None, description="restrict to these shape names of the deployment")
    submitted_by: str | None = Field(default=None, max_length=128,
                                     description="ignored: jobs record the submitting token's name")
    private: bool = Field(default=False, description="only the submitting token (and admins) can see the job")


class Progress(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    total: int
    queued: int
    running: int
    done: int
    cancelled: int
    by_verdict: dict[str, int]


JobState = Literal["queued", "running", "done", "cancelled"]


class JobOut(BaseModel):
    id: int
    variant_id: int
    kind: str
    model_name: str
    hardware: str
    queue: str
    deployment: dict[str, Any]
    configs: Any
    shapes: list[str] | None
    state: JobState
    progress: Progress
    submitted_by: str | None
    private: bool = False
    created_at: datetime
    cancelled_at: datetime | None


class JobCreated(BaseModel):
    job: JobOut
    runs: int
    enqueued: bool
    enqueue_error: str | None = Field(default=None, description="why enqueueing failed; the sweeper retries")


class CancelOut(BaseModel):
    job: JobOut
    cancelled_runs: int


class HeadToHead(BaseModel):
    """A run's head-to-head with its bucket's incumbent (workers/bench.py) and what it ranks by (db/queries/runs.py
    ranked_us): the same fields on a run, a leaderboard entry and a winner's evidence."""

    control_run_id: str | None = Field(default=None, description="the incumbent run timed beside this one")
    vs_control: float | None = Field(default=None, description="incumbent median / this median, same rounds")
    vs_control_ci_lo: float | None = None
    vs_control_ci_hi: float | None = None
    ranked_us: float | None = Field(default=None, description="what winners and the leaderboard rank by: the median "
                                    "in the incumbent's time base (the median where no incumbent was timed)")

    @classmethod
    def of(cls, run: Any) -> dict[str, Any]:
        """The fields from a db.models.Run, to pass into an output model built by keyword."""
        return {name: getattr(run, name) for name in HeadToHead.model_fields}


class RunOut(HeadToHead):
    model_config = ConfigDict(from_attributes=True)
    id: str
    job_id: int
    variant_id: int
    slot: str
    config: dict[str, Any]
    config_key: str
    shape_name: str
    shape_key: str
    m: int
    batch_bucket: str
    hardware: str
    seed: int
    status: Literal["queued", "running", "done", "cancelled"]
    attempts: int
    worker: str | None
    verdict: str | None
    reason_code: str | None
    reason: str | None
    median_us: float | None
    baseline_median_us: float | None
    speedup: float | None
    speedup_ci_lo: float | None
    speedup_ci_hi: float | None
    frac_of_floor: float | None
    uses_library: bool | None
    fingerprint_id: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class RunDetail(RunOut):
    shape: dict[str, Any]
    compile: dict[str, Any] | None
    check: dict[str, Any] | None
    bench: dict[str, Any] | None


class LeaderboardEntry(HeadToHead):
    rank: int
    run_id: str
    job_id: int
    variant_id: int
    content_hash: str
    author: str
    agent: str | None
    language: str
    config: dict[str, Any]
    median_us: float
    baseline_median_us: float | None
    speedup: float | None
    speedup_ci_lo: float | None
    speedup_ci_hi: float | None
    frac_of_floor: float | None
    uses_library: bool | None
    beats_stock: bool = Field(description="speedup CI lies above 1")


class LeaderboardGroup(BaseModel):
    slot: str
    hardware: str
    shape_name: str
    shape_key: str
    m: int
    batch_bucket: str
    entries: list[LeaderboardEntry]


class FingerprintOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: str
    hardware_class: str
    bandwidth_gbs: float | None
    fields: dict[str, Any]


class WinnerEvidence(HeadToHead):
    run_id: str
    job_id: int
    variant_id: int
    content_hash: str
    author: str
    agent: str | None
    language: str
    config: dict[str, Any]
    m: int
    median_us: float | None
    baseline_median_us: float | None
    speedup: float | None
    speedup_ci_lo: float | None
    speedup_ci_hi: float | None
    frac_of_floor: float | None
    uses_library: bool | None
    check: dict[str, Any] | None
    bench: dict[str, Any] | None
    fingerprint: FingerprintOut | None
    checked_ms: list[int] = Field(default_factory=list, description="the M of the bucket at which a passed run of this "
                                  "variant and config checked it (the winning run's M and any bucket checks)")
    unchecked_ms: list[int] = Field(default_factory=list, description="the M of the bucket no run checked: an exported "
                                    "package serves them with this kernel; POST /v1/winners/bucket-checks checks them")
    slower_ms: list[int] = Field(default_factory=list, description="the M of the bucket at which a run of this variant "
                                 "and config measured it slower than stock (speedup CI below 1): an exported package "
                                 "serves stock there")


class WinnerOut(BaseModel):
    slot: str
    shape_key: str
    shape_name: str
    batch_bucket: str
    hardware: str
    is_stock: bool = Field(description="nothing beat the stock kernel beyond noise: stock stays")
    updated_at: datetime
    evidence: WinnerEvidence | None


class SlotOut(BaseModel):
    name: str
    description: str
    inputs: list[str]
    weights: list[str]
    outputs: list[str]
    rationale: str = Field("", description="why the slot exists, where DESIGN.md's catalogue does not list it")


class ShapeOut(BaseModel):
    name: str
    key: str
    dims: dict[str, Any]
    dtype: str


class SlotShapes(BaseModel):
    slot: str
    model: str
    tp: int
    dtype: str
    draft_tokens: int
    token_counts: list[int]
    shapes: list[ShapeOut]


class ModelOut(BaseModel):
    name: str
    verified: bool
    notes: str
    spec: dict[str, Any]


class Health(BaseModel):
    status: Literal["ok"]


class Ready(BaseModel):
    status: Literal["ready", "not_ready"]
    database: str
    broker: str


# --- config searches (service/routers/searches.py) ------------------------------------------------

SearchStrategyName = Literal["exhaustive", "random", "tpe", "successive_halving", "transfer"]
SearchState = Literal["queued", "running", "done", "cancelled", "failed"]


class SearchBudget(BaseModel):
    """Limits per target (one shape at one M, or over one batch bucket); any limit reached stops it."""

    model_config = ConfigDict(populate_by_name=True)
    max_evals: int | None = Field(default=None, ge=1, description="evaluations (a short timing counts as one)")
    max_gpu_seconds: float | None = Field(default=None, gt=0, validation_alias=AliasChoices("max_gpu_seconds", "max_cost_s"),
                                          description="device seconds spent (alias: max_cost_s)")
    patience: int | None = Field(default=None, ge=1, description="full evaluations in a row without improving the best")


class SearchCreate(BaseModel):
    variant_id: int
    deployment: Deployment = Field(default_factory=Deployment)
    hardware: str = Field(default="cpu", pattern=HARDWARE_PATTERN)
    shapes: list[str] | None = Field(default=None, description="restrict to these shape names of the deployment")
    strategy: SearchStrategyName = "tpe"
    budget: SearchBudget = Field(default_factory=SearchBudget)
    batch_size: int | None = Field(default=None, ge=1, le=256,
                                   description="configs in flight per target; default: the queue's live workers, else 4")
    per: Literal["m", "bucket"] = Field(default="m", description='one sub-search per M, or per batch bucket '
                                                                 '(objective: the summed time over its Ms)')
    seed: int = Field(default=0, ge=0)
    options: dict[str, Any] = Field(default_factory=dict,
                                    description="strategy options: eta, rung_size (successive halving); "
                                                "n_startup_trials, max_model_asks, local_per_round, local_top (tpe)")
    private: bool = False

    @field_validator("options")
    @classmethod
    def _known_options(cls, v: dict[str, Any]) -> dict[str, Any]:
        allowed = {"eta", "rung_size", "n_startup_trials", "max_model_asks", "local_per_round", "local_top"}
        unknown = sorted(set(v) - allowed)
        if unknown:
            raise ValueError(f"unknown strategy options {unknown}; allowed: {sorted(allowed)}")
        return v


class SearchBest(BaseModel):
    config: dict[str, Any]
    median_us: float = Field(description="summed median over the target's Ms")
    baseline_median_us: float | None
    speedup: float | None
    run_ids: list[str]


class SearchHistoryPoint(BaseModel):
    evaluations: int
    gpu_seconds: float
    best_us: float | None


class SearchTargetOut(BaseModel):
    label: str
    shape_name: str
    shape_key: str
    ms: list[int]
    batch_bucket: str | None
    valid_points: int
    evaluations: int = Field(description="finished proposals (short and full)")
    full_evaluations: int
    failed: int
    in_flight: int
    gpu_seconds: float
    best: SearchBest | None
    finished: bool
    stop_reason: str | None
    history: list[SearchHistoryPoint] = Field(description="best-so-far after every finished proposal (for plotting)")


class SearchOut(BaseModel):
    id: int
    variant_id: int
    job_id: int
    short_job_id: int | None
    hardware: str
    queue: str
    model_name: str
    strategy: str
    budget: dict[str, Any]
    batch_size: int
    per: str
    seed: int
    options: dict[str, Any]
    state: SearchState
    error: str | None
    driver: str | None
    evaluations: int
    in_flight: int
    targets: list[SearchTargetOut]
    submitted_by: str | None
    private: bool
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    enqueue_error: str | None = Field(default=None, description="the drive task could not be sent; the sweeper retries")


class SearchCancelOut(BaseModel):
    search: SearchOut
    cancelled_runs: int
