"""The single definition of every agent tool: name, description, pydantic input and output models and
a handler that calls the REST API through service.client.Client and shapes a compact result.

agents.mcp_server serves these over MCP and agents.openai_schema turns them into OpenAI-style function
schemas (GET /v1/tools): both read ``TOOLS`` and ``Tool.input_schema()``, so they cannot drift apart.
Nothing here imports torch or the kernels package: an MCP server must start in well under a second.
"""

from __future__ import annotations

import ast
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agents.results import RunsSummary, RunVerdict, ci_for_display, representatives, summarize, verdict_of
from service.client import ApiError, Client

REPO = Path(__file__).resolve().parent.parent
VARIANTS_DIR = REPO / "kernels" / "variants"
BASELINE_FILE = "h200_torch_small_m.json"
DEFAULT_BATCHES = [1, 2, 4, 8, 16, 32, 64]
TP_CANDIDATES = (1, 2, 4, 8, 16, 32, 64)

CALLING_CONVENTION = (
    "Submit a Python module that defines build(config: dict, shape: dict) -> fn. `shape` holds the slot's "
    "dims plus M (tokens this decode step), slot, name and dtype, so a build is specialised per batch size. "
    "fn is called as fn(**inputs, **outputs) with keyword tensors named as listed (weights are inputs "
    "too): it must write every element of the preallocated outputs and return nothing. Optional module "
    "globals: CONFIG_SPACE = {param: [values, ...]} (the tunable configs, default for submit_variant), "
    "CONSTRAINTS = [\"BLOCK_N * SPLIT_K <= 256\", ...], USES_LIBRARY = True when a triton/cute variant "
    "calls library GEMMs (cuBLAS through torch); torch variants are library calls by their language.")
CORRECTNESS = (
    "Checked at every batch size against a high-precision reference: bf16 passes at relative L2 <= 1e-2 "
    "plus a per-element bound set by the slot; NaN/Inf fails. Outputs are poisoned (NaN) before each call, "
    "inputs hashed before and after (never write them), several trials on fresh inputs and on the same "
    "buffers with new values (no cached answers), the timed calls' outputs re-checked. Speedup = stock time "
    "/ variant time, timed in the same process, interleaved; a winner needs its speedup CI above 1.")


class ToolError(Exception):
    """A failure the agent should read: an API error, a missing route, invalid arguments."""


# --- the definition ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_model: type[BaseModel]
    output_model: type[BaseModel]
    handler: Callable[[Client, Any], BaseModel]
    read_only: bool = True

    def input_schema(self) -> dict[str, Any]:
        """The one JSON Schema of the arguments (MCP inputSchema = OpenAI function parameters)."""
        return _strip_titles(self.input_model.model_json_schema())

    def output_schema(self) -> dict[str, Any]:
        return _strip_titles(self.output_model.model_json_schema(mode="serialization"))

    def call(self, client: Client, arguments: Mapping[str, Any] | None) -> BaseModel:
        try:
            args = self.input_model.model_validate(dict(arguments or {}))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors())
            raise ToolError(f"invalid arguments for {self.name}: {problems}") from None
        try:
            return self.handler(client, args)
        except ApiError as exc:
            raise ToolError(f"kerneltune API error (HTTP {exc.status}): {exc.detail}") from None


def _strip_titles(node: Any, in_properties: bool = False) -> Any:
    """Pydantic's auto-generated "title" keywords only cost an agent tokens; property names stay."""
    if isinstance(node, dict):
        return {k: _strip_titles(v, k in ("properties", "$defs"))
                for k, v in node.items() if in_properties or not (k == "title" and isinstance(v, str))}
    if isinstance(node, list):
        return [_strip_titles(v) for v in node]
    return node


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoArgs(_Args):
    pass


def _missing_route(exc: ApiError, method: str, path: str, what: str) -> ToolError:
    """FastAPI answers an unknown route with a bare 404 'Not Found' (405 for a wrong method): say so."""
    return ToolError(f"this kerneltune API does not serve {method} {path} (HTTP {exc.status}: {exc.detail}): "
                     f"{what} are not available on this deployment yet")


def _post_optional_route(client: Client, path: str, body: dict[str, Any], what: str) -> Any:
    try:
        return client.post(path, body)
    except ApiError as exc:
        if exc.status in (404, 405) and exc.detail in ("Not Found", "Method Not Allowed"):
            raise _missing_route(exc, "POST", path, what) from None
        raise


# --- list_slots ----------------------------------------------------------------------------------

class SlotBrief(BaseModel):
    name: str
    description: str
    inputs: list[str]
    weights: list[str]
    outputs: list[str]
    torch_template: str | None = Field(description="shipped torch variant get_slot returns as a template")


class SlotsOut(BaseModel):
    slots: list[SlotBrief]


def _templates(slot: str) -> list[Path]:
    return sorted(VARIANTS_DIR.glob(f"*/{slot}_*.py"))


def _torch_template(slot: str) -> Path | None:
    return next((p for p in _templates(slot) if p.parent.name == "torch"), None)


def list_slots(client: Client, _: NoArgs) -> SlotsOut:
    rows = client.get("/v1/slots")
    return SlotsOut(slots=[SlotBrief(**{k: r[k] for k in ("name", "description", "inputs", "weights", "outputs")},
                                     torch_template=(t.name if (t := _torch_template(r["name"])) else None))
                           for r in rows])


# --- list_models ---------------------------------------------------------------------------------

_DIMS = ("hidden_size", "n_routed_experts", "num_experts_per_tok", "n_shared_experts", "moe_intermediate_size",
         "num_attention_heads", "q_lora_rank", "kv_lora_rank", "vocab_size", "num_hidden_layers", "n_group",
         "topk_group", "scoring_func")


class ModelBrief(BaseModel):
    name: str
    verified: bool
    notes: str
    dims: dict[str, Any]
    tp_options: list[int] = Field(description="TP degrees that split heads, vocab and the expert FFN evenly")


class ModelsOut(BaseModel):
    models: list[ModelBrief]
    deployment_defaults: dict[str, Any]
    note: str


def tp_options(spec: Mapping[str, Any]) -> list[int]:
    def splits(key: str, tp: int) -> bool:
        v = spec.get(key)
        return not isinstance(v, int) or v % tp == 0
    return [tp for tp in TP_CANDIDATES
            if all(splits(k, tp) for k in ("num_attention_heads", "vocab_size", "moe_intermediate_size"))]


def list_models(client: Client, _: NoArgs) -> ModelsOut:
    rows = client.get("/v1/models")
    return ModelsOut(
        models=[ModelBrief(name=r["name"], verified=r["verified"], notes=r.get("notes", ""),
                           dims={k: r["spec"][k] for k in _DIMS if k in r["spec"]}, tp_options=tp_options(r["spec"]))
                for r in rows],
        deployment_defaults={"model": "kimi-k2-like", "tp": 8, "dtype": "bfloat16", "batch_sizes": DEFAULT_BATCHES,
                             "draft_tokens": 0},
        note="a deployment = model + tp + dtype + batch sizes + speculative draft tokens; each decode step "
             "runs M = batch x (1 + draft_tokens) tokens; 'tiny-moe' is small enough for CPU workers")


# --- get_slot ------------------------------------------------------------------------------------

class DeploymentArgs(_Args):
    model: str = Field("kimi-k2-like", description="built-in model spec name (list_models)")
    tp: int = Field(8, ge=1, le=64, description="tensor-parallel degree: shapes are per TP rank")
    dtype: Literal["bfloat16", "float16"] = "bfloat16"
    batch_sizes: list[int] | None = Field(None, min_length=1, max_length=16,
                                          description="decode batch sizes; default 1, 2, 4, 8, 16, 32, 64")
    draft_tokens: int = Field(0, ge=0, le=15, description="speculative draft tokens: M = batch x (1 + drafts)")

    def deployment(self) -> dict[str, Any]:
        return {"spec": self.model, "tp": self.tp, "dtype": self.dtype,
                "batch_sizes": self.batch_sizes or DEFAULT_BATCHES, "draft_tokens": self.draft_tokens}


class GetSlotArgs(DeploymentArgs):
    name: str = Field(description="slot name (list_slots)")
    include_template: bool = Field(True, description="return a shipped torch variant's source to start from")


class StockFigure(BaseModel):
    op: str
    N: int
    K: int
    us_by_m: dict[str, float] = Field(description="measured stock microseconds per M")
    frac_of_floor_by_m: dict[str, float] = Field(description="fraction of the HBM floor reached per M")


class ShapeInfo(BaseModel):
    name: str
    key: str
    dims: dict[str, Any]
    dtype: str
    h200_stock: list[StockFigure] = Field(default_factory=list,
                                          description="measured H200 stock GEMM figures for these dims, if known")


class Template(BaseModel):
    path: str
    source: str


class SlotDetail(BaseModel):
    name: str
    description: str
    inputs: list[str]
    weights: list[str]
    outputs: list[str]
    calling_convention: str
    correctness: str
    deployment: dict[str, Any]
    token_counts: list[int] = Field(description="the M values a job runs at")
    shapes: list[ShapeInfo]
    h200_baseline: str | None = Field(description="what the h200_stock figures are, when any matched")
    template: Template | None
    other_templates: list[str]


@lru_cache(maxsize=1)
def _baselines() -> dict[str, Any] | None:
    """The measured H200 stock table (DESIGN.md); looked for where the repo and its deployments keep it."""
    env = os.environ.get("KT_BASELINES")
    for p in ([Path(env)] if env else []) + [REPO / "bench" / "baselines" / BASELINE_FILE,
                                             REPO.parent / "shared" / "baselines" / BASELINE_FILE]:
        if p.is_file():
            return json.loads(p.read_text())
    return None


def _gemm_dims(slot: str, dims: Mapping[str, Any]) -> list[tuple[int, int]]:
    """The (N, K) GEMMs a slot's shape contains, to look up in the baseline table."""
    g = dims.get
    if slot in ("dense_gemm", "oproj_residual_norm", "rmsnorm_gemm", "mla_norms_gemm") and g("N") and g("K"):
        return [(g("N"), g("K"))]
    if slot == "router" and g("E") and g("K"):
        return [(g("E"), g("K"))]
    if slot in ("moe_experts", "shared_expert") and g("I") and g("K"):
        return [(2 * g("I"), g("K")), (g("K"), g("I"))]
    return []


def stock_figures(slot: str, dims: Mapping[str, Any]) -> list[StockFigure]:
    table = _baselines()
    if not table:
        return []
    out = []
    for n, k in _gemm_dims(slot, dims):
        rows = [r for r in table.get("rows", []) if r.get("N") == n and r.get("K") == k]
        for op in sorted({r["op"] for r in rows}):
            mine = [r for r in rows if r["op"] == op]
            out.append(StockFigure(op=op, N=n, K=k, us_by_m={str(r["M"]): r["us"] for r in mine},
                                   frac_of_floor_by_m={str(r["M"]): r["frac"] for r in mine}))
    return out


def get_slot(client: Client, a: GetSlotArgs) -> SlotDetail:
    slots = {s["name"]: s for s in client.get("/v1/slots")}
    if a.name not in slots:
        raise ToolError(f"unknown slot {a.name!r}; known slots: {', '.join(sorted(slots))}")
    dep = a.deployment()
    shaped = client.get(f"/v1/slots/{a.name}", model=a.model, tp=a.tp, dtype=a.dtype,
                        draft_tokens=a.draft_tokens, batch_sizes=dep["batch_sizes"])
    shapes = [ShapeInfo(**s, h200_stock=stock_figures(a.name, s["dims"])) for s in shaped["shapes"]]
    table = _baselines()
    note = None
    if table and any(s.h200_stock for s in shapes):
        note = f"{table.get('what', '')} ({table.get('device', '')}, measured {table.get('measured', '')})"
    tpl = _torch_template(a.name)
    s = slots[a.name]
    return SlotDetail(
        name=a.name, description=s["description"], inputs=s["inputs"], weights=s["weights"], outputs=s["outputs"],
        calling_convention=CALLING_CONVENTION, correctness=CORRECTNESS, deployment=dep,
        token_counts=shaped["token_counts"], shapes=shapes, h200_baseline=note,
        template=Template(path=str(tpl.relative_to(REPO)), source=tpl.read_text())
        if tpl and a.include_template else None,
        other_templates=[str(p.relative_to(REPO)) for p in _templates(a.name) if p != tpl])


# --- submit_variant ------------------------------------------------------------------------------

class SubmitArgs(_Args):
    slot: str = Field(description="slot name (list_slots)")
    source: str = Field(description="the Python module text; defines build(config, shape) -> fn")
    language: Literal["torch", "triton", "cute"] = "torch"
    config_space: dict[str, Any] | None = Field(
        None, description='{param: [values, ...], "constraints": ["expr", ...]}; default: the module\'s '
                          "CONFIG_SPACE and CONSTRAINTS, or a single empty config")
    author: str = Field("agent", min_length=1, max_length=128)
    agent: str | None = Field(None, max_length=128, description="agent name/model")
    parent_id: int | None = Field(None, description="variant this one derives from")
    notes: str = Field("", max_length=16_384, description="what changed and why: kept as provenance")


class VariantOut(BaseModel):
    variant_id: int
    content_hash: str
    created: bool = Field(description="false: this exact source was already submitted (same id)")
    config_space: dict[str, Any]


def module_space(source: str) -> dict[str, Any]:
    """CONFIG_SPACE / CONSTRAINTS literals read from the module text without executing it."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}  # the API reports the syntax error with its line
    found: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("CONFIG_SPACE", "CONSTRAINTS"):
                try:
                    found[node.targets[0].id] = ast.literal_eval(node.value)
                except ValueError:
                    pass
    space = dict(found.get("CONFIG_SPACE") or {})
    if found.get("CONSTRAINTS"):
        space["constraints"] = list(found["CONSTRAINTS"])
    return space


def submit_variant(client: Client, a: SubmitArgs) -> VariantOut:
    space = a.config_space if a.config_space is not None else module_space(a.source)
    out = client.post("/v1/variants", {
        "slot": a.slot, "language": a.language, "source": a.source, "config_space": space,
        "provenance": {"author": a.author, "agent": a.agent, "parent_id": a.parent_id, "notes": a.notes}})
    return VariantOut(variant_id=out["id"], content_hash=out["content_hash"], created=out["created"],
                      config_space=space)


# --- start_evaluation ----------------------------------------------------------------------------

class EvaluateArgs(DeploymentArgs):
    variant_id: int
    hardware: str = Field("cpu", description='hardware class whose queue runs it: "cpu", "h200", "gb300"')
    configs: Literal["all"] | list[dict[str, Any]] = Field(
        "all", description='"all" (the whole config space, constraints applied) or a list of configs')
    shapes: list[str] | None = Field(None, description="only these shape names (get_slot); default all")


class JobStarted(BaseModel):
    job_id: int
    runs: int
    state: str
    queue: str | None = None
    enqueued: bool = True
    enqueue_error: str | None = None
    next: str


def _job_body(a: EvaluateArgs) -> dict[str, Any]:
    body: dict[str, Any] = {"variant_id": a.variant_id, "deployment": a.deployment(), "hardware": a.hardware,
                            "configs": a.configs}
    if a.shapes:
        body["shapes"] = a.shapes
    return body


def start_evaluation(client: Client, a: EvaluateArgs) -> JobStarted:
    out = client.post("/v1/jobs", _job_body(a))
    job = out.get("job", out)  # JobCreated wraps the job; tolerate a bare JobOut
    return JobStarted(job_id=job["id"], runs=out.get("runs", job["progress"]["total"]), state=job["state"],
                      queue=job.get("queue"), enqueued=out.get("enqueued", True), enqueue_error=out.get("enqueue_error"),
                      next=f"wait_for_job(job_id={job['id']})")


# --- start_search --------------------------------------------------------------------------------

class SearchArgs(DeploymentArgs):
    variant_id: int
    hardware: str = Field("cpu", description='hardware class: "cpu", "h200", "gb300"')
    strategy: Literal["exhaustive", "random", "successive_halving", "tpe", "transfer"] = "tpe"
    max_evals: int | None = Field(None, ge=1, description="stop after this many evaluations")
    max_cost_s: float | None = Field(None, gt=0, description="stop after this much device time")
    patience: int | None = Field(None, ge=1, description="stop after this many evaluations without improving")
    shapes: list[str] | None = None
    seed: int = 0
    options: dict[str, int | float] = Field(
        default_factory=dict, description="strategy options, e.g. {\"local_per_round\": 0} (tpe without its local steps "
                                          "from the best so far; default 2), {\"n_startup_trials\": 6}, {\"eta\": 3} "
                                          "(successive halving)")


class SearchStarted(BaseModel):
    search: dict[str, Any] = Field(description="the API's answer")


def start_search(client: Client, a: SearchArgs) -> SearchStarted:
    body = {"variant_id": a.variant_id, "deployment": a.deployment(), "hardware": a.hardware,
            "strategy": a.strategy, "budget": {"max_evals": a.max_evals, "max_cost_s": a.max_cost_s,
                                               "patience": a.patience},
            "shapes": a.shapes, "seed": a.seed, "options": a.options}
    return SearchStarted(search=_post_optional_route(client, "/v1/searches", body, "config searches"))


# --- wait_for_job / get_runs ---------------------------------------------------------------------

class WaitArgs(_Args):
    job_id: int
    timeout_s: float = Field(300, ge=0, le=3600, description="give up waiting after this long (the job goes on)")
    poll_s: float = Field(2.0, ge=0.2, le=60)
    detail_runs: int = Field(5, ge=0, le=20, description="failure groups to fetch full evidence for")


class JobWait(BaseModel):
    job_id: int
    variant_id: int
    state: str
    finished: bool
    timed_out: bool
    waited_s: float
    progress: dict[str, Any]
    summary: RunsSummary | None = Field(description="verdicts, speedup per (shape, M), failures, hints")


def _source(client: Client, variant_id: int, runs: list[dict[str, Any]]) -> str | None:
    """The variant's source, only when a failure may point at one of its lines."""
    if not any(r.get("verdict") in ("compile_failed", "crashed") for r in runs):
        return None
    return client.get(f"/v1/variants/{variant_id}").get("source")


def _summary(client: Client, job: Mapping[str, Any], runs: list[dict[str, Any]], detail_runs: int) -> RunsSummary:
    details = {rid: client.get(f"/v1/runs/{rid}") for rid in representatives(runs)[:detail_runs]}
    return summarize(runs, _source(client, job["variant_id"], runs), details)


def wait_for_job(client: Client, a: WaitArgs) -> JobWait:
    t0 = time.monotonic()
    while True:
        job = client.get(f"/v1/jobs/{a.job_id}")
        finished = job["state"] in ("done", "cancelled")
        left = a.timeout_s - (time.monotonic() - t0)
        if finished or left <= 0:
            break
        time.sleep(min(a.poll_s, left))
    runs = client.get(f"/v1/jobs/{a.job_id}/runs") if job["progress"]["done"] else []
    return JobWait(job_id=a.job_id, variant_id=job["variant_id"], state=job["state"], finished=finished,
                   timed_out=not finished, waited_s=round(time.monotonic() - t0, 1), progress=job["progress"],
                   summary=_summary(client, job, runs, a.detail_runs) if runs else None)


class RunsArgs(_Args):
    job_id: int
    verdict: Literal["passed", "compiled", "compile_failed", "check_failed", "rejected", "crashed", "timeout",
                     "error"] | None = None
    shape: str | None = Field(None, description="only this shape name")
    m: int | None = Field(None, ge=1, description="only this M")
    limit: int = Field(50, ge=1, le=1000)
    details: bool = Field(False, description="fetch each listed failing run's evidence (max 10 extra calls)")


class RunsOut(BaseModel):
    job_id: int
    total: int = Field(description="runs matching the filters")
    shown: int
    runs: list[RunVerdict]
    hints: list[str]


def get_runs(client: Client, a: RunsArgs) -> RunsOut:
    rows = client.get(f"/v1/jobs/{a.job_id}/runs", verdict=a.verdict)
    rows = [r for r in rows if (a.shape is None or r.get("shape_name") == a.shape) and (a.m is None or r.get("m") == a.m)]
    shown = rows[:a.limit]
    failing = [r for r in shown if r.get("verdict") not in (None, "passed")]
    details = {r["id"]: client.get(f"/v1/runs/{r['id']}") for r in failing[:10]} if a.details else {}
    source = _source(client, rows[0]["variant_id"], rows) if rows else None
    merged = [dict(details.get(r["id"], {}), **r) for r in shown]
    return RunsOut(job_id=a.job_id, total=len(rows), shown=len(shown),
                   runs=[verdict_of(r, source) for r in merged], hints=summarize(rows, source).hints)


# --- leaderboard / winners -----------------------------------------------------------------------

class BoardArgs(_Args):
    slot: str | None = None
    hardware: str | None = None
    model: str | None = Field(None, description="model spec name of the jobs' deployment")
    shape: str | None = Field(None, description="shape name or key")
    top: int = Field(3, ge=1, le=50, description="entries per (shape, M)")


class BoardEntry(BaseModel):
    rank: int
    variant_id: int
    run_id: str
    by: str
    language: str
    config: dict[str, Any]
    us: float | None
    stock_us: float | None
    speedup: float | None
    speedup_ci: tuple[float, float] | None
    beats_stock: bool
    frac_of_floor: float | None
    uses_library: bool | None


class BoardGroup(BaseModel):
    slot: str
    hardware: str
    shape: str
    m: int
    bucket: str
    entries: list[BoardEntry]


class BoardOut(BaseModel):
    groups: list[BoardGroup]


def _r(v: Any, nd: int = 3) -> float | None:
    return None if v is None else round(float(v), nd)


def _ci(d: Mapping[str, Any]) -> tuple[float, float] | None:
    return ci_for_display(d.get("speedup_ci_lo"), d.get("speedup_ci_hi"))


def leaderboard(client: Client, a: BoardArgs) -> BoardOut:
    groups = client.get("/v1/leaderboard", slot=a.slot, hardware=a.hardware, model=a.model, shape=a.shape,
                        per_group=a.top)
    return BoardOut(groups=[BoardGroup(
        slot=g["slot"], hardware=g["hardware"], shape=g["shape_name"], m=g["m"], bucket=g["batch_bucket"],
        entries=[BoardEntry(rank=e["rank"], variant_id=e["variant_id"], run_id=e["run_id"],
                            by=e.get("agent") or e.get("author") or "", language=e["language"], config=e["config"],
                            us=_r(e.get("median_us")), stock_us=_r(e.get("baseline_median_us")),
                            speedup=_r(e.get("speedup")), speedup_ci=_ci(e), beats_stock=bool(e.get("beats_stock")),
                            frac_of_floor=_r(e.get("frac_of_floor")), uses_library=e.get("uses_library"))
                 for e in g["entries"][:a.top]]) for g in groups])


class WinnersArgs(_Args):
    slot: str | None = None
    hardware: str | None = None


class WinnerBrief(BaseModel):
    slot: str
    shape: str
    shape_key: str
    bucket: str
    hardware: str
    stock: bool = Field(description="nothing beat stock beyond noise: stock stays")
    variant_id: int | None = None
    run_id: str | None = None
    by: str | None = None
    config: dict[str, Any] | None = None
    us: float | None = None
    speedup: float | None = None
    speedup_ci: tuple[float, float] | None = None
    unchecked_ms: list[int] = Field(default_factory=list, description="batch sizes its bucket serves that no run "
                                    "checked; the check_buckets tool checks them")
    slower_ms: list[int] = Field(default_factory=list, description="batch sizes of its bucket where it was measured "
                                 "slower than stock: an export serves stock there; a kernel tuned for them can win")


class WinnersOut(BaseModel):
    winners: list[WinnerBrief]


def winners(client: Client, a: WinnersArgs) -> WinnersOut:
    out = []
    for w in client.get("/v1/winners", slot=a.slot, hardware=a.hardware):
        ev = w.get("evidence") or {}
        out.append(WinnerBrief(slot=w["slot"], shape=w["shape_name"], shape_key=w["shape_key"],
                               bucket=w["batch_bucket"], hardware=w["hardware"], stock=w["is_stock"],
                               variant_id=ev.get("variant_id"), run_id=ev.get("run_id"),
                               by=ev.get("agent") or ev.get("author"), config=ev.get("config"),
                               us=_r(ev.get("median_us")), speedup=_r(ev.get("speedup")), speedup_ci=_ci(ev),
                               unchecked_ms=ev.get("unchecked_ms") or [], slower_ms=ev.get("slower_ms") or []))
    return WinnersOut(winners=out)


# --- export --------------------------------------------------------------------------------------

class ExportArgs(_Args):
    hardware: str = Field("h200", description="hardware class whose winners are exported")
    model: str = Field("kimi-k2-like", description="model spec whose winners are exported")
    allow_partial: bool = Field(False, description="export what qualifies and list the rest, instead of refusing")
    version: str = Field("0.1.0", description="package version")
    every_m: bool = Field(False, description="ship a winner only where its runs checked every batch size its bucket "
                                             "serves (check_buckets fills the rest)")
    aot: bool = Field(True, description="compile the CuTe DSL entries ahead of time, so vLLM JIT-compiles nothing")


class ExportOut(BaseModel):
    export: dict[str, Any] = Field(description="the API's answer")


def export(client: Client, a: ExportArgs) -> ExportOut:
    body = a.model_dump(exclude_none=True)
    return ExportOut(export=_post_optional_route(client, "/v1/exports", body, "package exports"))


# --- bucket checks -------------------------------------------------------------------------------

class CheckBucketsArgs(_Args):
    hardware: str = Field("h200", description="hardware class of the winners")
    model: str = Field("kimi-k2-like", description="model spec whose winners are checked")


class CheckBucketsOut(BaseModel):
    winners: int = Field(description="winners with batch sizes in their bucket that no run covers yet")
    runs: int = Field(description="short check runs started, one per such batch size")
    job_ids: list[int] = Field(description="one job per variant: follow each with wait_for_job")


def check_buckets(client: Client, a: CheckBucketsArgs) -> CheckBucketsOut:
    res = _post_optional_route(client, "/v1/winners/bucket-checks", a.model_dump(exclude_none=True), "bucket checks")
    return CheckBucketsOut(winners=res["entries"], runs=res["runs"], job_ids=[j["job"]["id"] for j in res["jobs"]])


# --- the registry --------------------------------------------------------------------------------

TOOLS: tuple[Tool, ...] = (
    Tool("list_slots", "List the tunable slots of the MoE decode layer (dense_gemm, router, moe_experts, ...) "
         "with their tensor names. Start here.", NoArgs, SlotsOut, list_slots),
    Tool("list_models", "List the built-in model specs (deployments' models) with their key dims and the "
         "TP degrees each supports, plus the deployment defaults.", NoArgs, ModelsOut, list_models),
    Tool("get_slot", "Everything needed to write a variant of one slot: reference description, calling "
         "convention, correctness rule, the shapes a deployment gives it (and the M values a job runs), "
         "measured H200 stock figures where known, and a shipped torch variant's source as a template.",
         GetSlotArgs, SlotDetail, get_slot),
    Tool("submit_variant", "Submit a variant module for a slot (same source = same id). The config space "
         "defaults to the module's CONFIG_SPACE/CONSTRAINTS. Then call start_evaluation.",
         SubmitArgs, VariantOut, submit_variant, read_only=False),
    Tool("start_evaluation", "Start a job: compile, check (at every batch size) and benchmark a variant "
         "against stock for a deployment on a hardware queue, over all configs or a list. Returns the job id "
         "for wait_for_job.", EvaluateArgs, JobStarted, start_evaluation, read_only=False),
    Tool("start_search", "Start a config search (strategy + budget) over a variant's config space instead of "
         "evaluating every config.", SearchArgs, SearchStarted, start_search, read_only=False),
    Tool("wait_for_job", "Wait until a job finishes (or timeout_s passes; the job keeps running) and return "
         "its progress and a compact summary: verdict counts, best speedup per (shape, M), failures grouped "
         "by cause with the offending source line or first mismatching elements, and what to try next.",
         WaitArgs, JobWait, wait_for_job),
    Tool("get_runs", "Compact per-run verdicts of a job (filter by verdict, shape, M), optionally with each "
         "failing run's evidence.", RunsArgs, RunsOut, get_runs),
    Tool("leaderboard", "Passing runs ranked per (slot, shape, M, hardware), fastest first, with speedup vs "
         "stock and its CI.", BoardArgs, BoardOut, leaderboard),
    Tool("winners", "Current winner per (slot, shape, batch bucket, hardware), or stock where nothing beat it "
         "beyond noise.", WinnersArgs, WinnersOut, winners),
    Tool("check_buckets", "Check each winner at the batch sizes of its bucket that no run measured (the package "
         "runs a bucket's winner at all of them): short runs that never change the ranking; a failure takes the "
         "bucket from that config.", CheckBucketsArgs, CheckBucketsOut, check_buckets, read_only=False),
    Tool("export", "Build the vLLM latency_specialized backend package from the current winners.",
         ExportArgs, ExportOut, export, read_only=False),
)

BY_NAME: dict[str, Tool] = {t.name: t for t in TOOLS}


def call_tool(client: Client, name: str, arguments: Mapping[str, Any] | None) -> BaseModel:
    tool = BY_NAME.get(name)
    if tool is None:
        raise ToolError(f"unknown tool {name!r}; tools: {', '.join(BY_NAME)}")
    return tool.call(client, arguments)
