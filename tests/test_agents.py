"""Agent tools end to end: the MCP SDK's own client over stdio and streamable HTTP against a real
kerneltune API + Celery worker (service.embedded), GET /v1/tools against the MCP schemas, and the
run summaries on verdicts the real harness produced."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from agents.mcp_server import mcp_tools
from agents.openai_schema import openai_tools
from agents.results import ci_for_display
from agents.results import summarize
from agents.tools import BY_NAME, module_space
from service.embedded import EmbeddedStack

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "kernels" / "variants" / "torch" / "dense_gemm_matmul.py"
TINY = {"model": "tiny-moe", "tp": 1, "batch_sizes": [1, 4]}

# Drops the last partial tile of rows (so M=1 < BLOCK_M writes nothing) and cannot build BLOCK_N=100
# for N=192: the two mistakes the summaries must explain, with the line build() raised at.
BROKEN = '''import torch

CONFIG_SPACE = {"BLOCK_M": [4], "BLOCK_N": [64, 100]}

def build(config, shape):
    bm, bn = config["BLOCK_M"], config["BLOCK_N"]
    if shape["N"] % bn:
        raise ValueError(f"N={shape['N']} is not a multiple of BLOCK_N={bn}")

    def run(x, w, out):
        m = x.shape[0]
        for i in range(0, m - m % bm, bm):
            torch.matmul(x[i:i + bm], w.t(), out=out[i:i + bm])

    return run
'''
RAISE_LINE = 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    st = EmbeddedStack(tmp_path_factory.mktemp("kt"), port=free_port())
    try:
        st.start()
    except Exception:
        st.stop()
        raise
    yield st
    st.stop()


def _server_env(stack: EmbeddedStack) -> dict[str, str]:
    # KT_DATA_DIR: service.client reads the embedded stack's local admin token from there.
    return {"PYTHONPATH": str(REPO), "KT_DATA_DIR": str(stack.data_dir)}


def _structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    data = result.structured_content
    assert data == json.loads(result.content[0].text)  # text for plain clients, same data structured
    return data


async def _call(s: ClientSession, tool: str, **args: Any) -> dict[str, Any]:
    return _structured(await s.call_tool(tool, args))


async def _error(s: ClientSession, tool: str, **args: Any) -> str:
    result = await s.call_tool(tool, args)
    assert result.is_error, f"{tool} should have failed: {result.structured_content}"
    return result.content[0].text


# --- MCP over stdio: the whole loop with the shipped variant ------------------------------------

async def _stdio_loop(stack: EmbeddedStack, errlog: Any) -> dict[str, Any]:
    params = StdioServerParameters(command=sys.executable, cwd=str(REPO), env=_server_env(stack),
                                   args=["-m", "agents.mcp_server", "--transport", "stdio", "--api", stack.url])
    out: dict[str, Any] = {}
    async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        out["tools"] = {t.name: t.input_schema for t in (await s.list_tools()).tools}
        slots = await _call(s, "list_slots")
        out["slots"] = {x["name"] for x in slots["slots"]}
        out["models"] = await _call(s, "list_models")
        out["slot"] = await _call(s, "get_slot", name="dense_gemm", **TINY)
        out["slot_k2"] = await _call(s, "get_slot", name="dense_gemm", include_template=False)
        source = out["slot"]["template"]["source"]
        v = await _call(s, "submit_variant", slot="dense_gemm", source=source, agent="pytest-agent",
                        notes="shipped torch variant")
        out["variant"] = v
        job = await _call(s, "start_evaluation", variant_id=v["variant_id"], shapes=["q_b_proj"], **TINY)
        out["job"] = job
        out["wait"] = await _call(s, "wait_for_job", job_id=job["job_id"], timeout_s=300, poll_s=1)
        out["runs"] = await _call(s, "get_runs", job_id=job["job_id"])
        out["board"] = await _call(s, "leaderboard", slot="dense_gemm", hardware="cpu", model="tiny-moe")
        out["winners"] = await _call(s, "winners", slot="dense_gemm", hardware="cpu")
        out["checks"] = await _call(s, "check_buckets", hardware="cpu", model="tiny-moe")
    return out


def test_mcp_stdio_full_loop(stack: EmbeddedStack, tmp_path: Path) -> None:
    with open(tmp_path / "mcp_stderr.log", "w") as errlog:
        out = anyio.run(_stdio_loop, stack, errlog)

    # the tools the server lists are the registry's, with the very schemas /v1/tools serves
    assert out["tools"] == {f["function"]["name"]: f["function"]["parameters"] for f in openai_tools()}
    assert set(out["tools"]) == set(BY_NAME)
    assert {"dense_gemm", "router", "moe_experts"} <= out["slots"]
    tiny = next(m for m in out["models"]["models"] if m["name"] == "tiny-moe")
    assert 1 in tiny["tp_options"] and 8 not in tiny["tp_options"]  # 4 heads do not split over 8

    slot = out["slot"]
    assert slot["token_counts"] == [1, 4]
    q_b = next(x for x in slot["shapes"] if x["name"] == "q_b_proj")
    assert q_b["dims"] == {"N": 192, "K": 128} and q_b["h200_stock"] == []  # no H200 figures for tiny dims
    assert slot["template"]["source"] == SHIPPED.read_text()
    assert "build(config: dict, shape: dict) -> fn" in slot["calling_convention"]
    k2_q_b = next(x for x in out["slot_k2"]["shapes"] if x["name"] == "q_b_proj")
    figures = {f["op"]: f for f in k2_q_b["h200_stock"]}
    assert figures["q_b_proj_tp8"]["us_by_m"]["1"] > 0 and out["slot_k2"]["h200_baseline"]
    assert out["slot_k2"]["template"] is None

    assert out["variant"]["config_space"] == {"n_chunks": [1, 2, 4]}  # read from the module's CONFIG_SPACE
    assert out["job"]["runs"] == 6  # 3 configs x 1 shape x 2 batch sizes

    wait = out["wait"]
    assert wait["finished"] and wait["state"] == "done", wait
    summary = wait["summary"]
    assert summary["by_verdict"] == {"passed": 6}, summary
    assert summary["failures"] == [] and summary["hardware"] == ["cpu"]
    cells = {(c["shape"], c["m"]): c for c in summary["speed"]}
    assert set(cells) == {("q_b_proj", 1), ("q_b_proj", 4)}
    for c in cells.values():
        lo, hi = c["speedup_ci"]
        assert 0 < lo <= c["speedup"] <= hi and c["us"] > 0 and c["stock_us"] > 0
        assert c["passed_configs"] == 3 and c["tried_configs"] == 3
        assert c["versus_stock"] == ("faster" if lo > 1 else "slower" if hi < 1 else "within noise")
    assert any(h.startswith("q_b_proj: ") and "stock" in h for h in summary["hints"])

    runs = out["runs"]["runs"]
    assert out["runs"]["total"] == 6 and len(runs) == 6
    assert all(r["verdict"] == "passed" and r["speedup"] > 0 and r["reason"] is None for r in runs)
    fastest = {m: min((r for r in runs if r["m"] == m), key=lambda r: r["ranked_us"]) for m in (1, 4)}
    for m, r in fastest.items():  # the summary's cell is the fastest run, as the leaderboard ranks
        assert (cells[("q_b_proj", m)]["us"], cells[("q_b_proj", m)]["speedup"]) == (r["us"], r["speedup"])

    groups = {(g["shape"], g["m"]): g for g in out["board"]["groups"]}
    assert {("q_b_proj", 1), ("q_b_proj", 4)} <= set(groups)
    for m in (1, 4):
        top = groups[("q_b_proj", m)]["entries"][0]
        assert top["rank"] == 1 and top["variant_id"] == out["variant"]["variant_id"]
        assert top["run_id"] == fastest[m]["run_id"] and top["us"] == pytest.approx(fastest[m]["us"], abs=1e-3)
        assert top["beats_stock"] == (top["speedup_ci"][0] > 1)
    for w in out["winners"]["winners"]:  # a winner is stock, or beat stock beyond noise
        assert w["stock"] or w["speedup_ci"][0] > 1, w
    # the job ran M = 1 and 4: a tuned 3-4 winner lacks M = 3 alone, a tuned 1 winner lacks nothing
    checks = out["checks"]
    tuned_34 = sum(1 for w in out["winners"]["winners"] if w["bucket"] == "3-4" and not w["stock"])
    assert checks["winners"] == checks["runs"] == tuned_34 and len(checks["job_ids"]) == min(tuned_34, 1)


# --- MCP over streamable HTTP: a broken variant and the errors an agent must be able to read ------

async def _http_loop(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        out["tools"] = {t.name for t in (await s.list_tools()).tools}
        v = await _call(s, "submit_variant", slot="dense_gemm", source=BROKEN, agent="pytest-agent")
        job = await _call(s, "start_evaluation", variant_id=v["variant_id"], shapes=["q_b_proj"], **TINY)
        out["job"] = job
        out["wait"] = await _call(s, "wait_for_job", job_id=job["job_id"], timeout_s=300, poll_s=1)
        out["failed_runs"] = await _call(s, "get_runs", job_id=job["job_id"], verdict="check_failed", details=True)
        out["syntax"] = await _error(s, "submit_variant", slot="dense_gemm",
                                     source="def build(config, shape):\n    return (\n")
        out["no_variant"] = await _error(s, "start_evaluation", model="tiny-moe")
        out["bad_slot"] = await _error(s, "get_slot", name="no_such_slot")
        for name in ("start_search", "export"):  # routes other engineers may not have shipped yet
            args = ({"variant_id": v["variant_id"], **TINY, "options": {"local_per_round": 1}} if name == "start_search"
                    else {"hardware": "cpu"})
            res = await s.call_tool(name, args)
            out[name] = res.content[0].text if res.is_error else _structured(res)
    return out


def test_mcp_http_broken_variant(stack: EmbeddedStack, tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, **_server_env(stack)}
    with open(tmp_path / "mcp_http.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "agents.mcp_server", "--transport", "http", "--api", stack.url,
                                 "--port", str(port)], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "mcp_http.log").read_text()
                    time.sleep(0.2)
            out = anyio.run(_http_loop, f"http://127.0.0.1:{port}/mcp")
        finally:
            proc.terminate()
            proc.wait(timeout=10)

    assert out["tools"] == set(BY_NAME)
    assert out["job"]["runs"] == 4  # 2 configs x 2 batch sizes
    summary = out["wait"]["summary"]
    assert out["wait"]["finished"], out["wait"]
    assert summary["by_verdict"] == {"check_failed": 1, "compile_failed": 2, "passed": 1}, summary
    groups = {g["verdict"]: g for g in summary["failures"]}
    comp = groups["compile_failed"]
    assert comp["configs"] == [{"BLOCK_M": 4, "BLOCK_N": 100}] and comp["ms"] == [1, 4]
    assert comp["example"]["source_line"] == f"line {RAISE_LINE}: " + BROKEN.splitlines()[RAISE_LINE - 1].strip()
    check = groups["check_failed"]
    assert check["reason_code"] == "unwritten_output" and check["ms"] == [1]
    ex = check["example"]
    assert ex["failed_trial"] == "fresh" and ex["mismatches"], ex  # evidence fetched from GET /v1/runs/{id}
    assert ex["mismatches"][0]["index"] == [0, 0] and ex["mismatches"][0]["got"] is None
    assert isinstance(ex["mismatches"][0]["expected"], float)
    hints = " | ".join(summary["hints"])
    assert "fails only at M=1 (passes at M=4)" in hints and "partial tiles" in hints
    assert "build() fails for 1 of 2 (shape, config) pairs (e.g. q_b_proj {\"BLOCK_M\":4,\"BLOCK_N\":100})" in hints
    assert [(c["m"], c["config"]) for c in summary["speed"]] == [(4, {"BLOCK_M": 4, "BLOCK_N": 64})]

    failed = out["failed_runs"]
    assert failed["total"] == 1 and failed["runs"][0]["m"] == 1 and failed["runs"][0]["mismatches"]

    assert "line 2" in out["syntax"] and "HTTP 422" in out["syntax"]
    assert "variant_id" in out["no_variant"] and "invalid arguments for start_evaluation" in out["no_variant"]
    assert "no_such_slot" in out["bad_slot"] and "dense_gemm" in out["bad_slot"]
    for name, path in (("start_search", "/v1/searches"), ("export", "/v1/exports")):
        if isinstance(out[name], str):  # an error must name the route and what it means, not just "Not Found"
            assert path in out[name] or "HTTP 4" in out[name], out[name]
    # /v1/searches ships with the service: the call succeeds and its strategy options travel through the tool
    assert out["start_search"]["search"]["options"] == {"local_per_round": 1}, out["start_search"]


# --- GET /v1/tools ------------------------------------------------------------------------------

def test_v1_tools_are_the_mcp_input_schemas() -> None:
    from service.routers.tools import router

    app = FastAPI()
    app.include_router(router)
    with TestClient(app) as c:
        resp = c.get("/v1/tools")
    assert resp.status_code == 200
    served = resp.json()
    mcp = {t.name: t for t in mcp_tools()}
    assert [f["function"]["name"] for f in served] == list(BY_NAME) == list(mcp)
    for f in served:
        assert f["type"] == "function" and f["function"]["description"]
        params = f["function"]["parameters"]
        jsonschema.Draft202012Validator.check_schema(params)
        assert params["type"] == "object" and params.get("additionalProperties") is False
        assert params == mcp[f["function"]["name"]].input_schema
        jsonschema.Draft202012Validator.check_schema(mcp[f["function"]["name"]].output_schema)
    # the schema and the tool's own validation agree: a valid call validates, an invalid one does not
    evaluate = next(f["function"]["parameters"] for f in served if f["function"]["name"] == "start_evaluation")
    good = {"variant_id": 3, "model": "tiny-moe", "tp": 1, "configs": [{"n_chunks": 2}], "shapes": ["q_b_proj"]}
    jsonschema.validate(good, evaluate)
    BY_NAME["start_evaluation"].input_model.model_validate(good)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"variant_id": 3, "configs": "some"}, evaluate)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"variant_id": 3, "bogus": 1}, evaluate)


def test_module_space_reads_literals_without_running_the_module() -> None:
    assert module_space(SHIPPED.read_text()) == {"n_chunks": [1, 2, 4]}
    src = 'import os\nCONFIG_SPACE = {"A": [1, 2]}\nCONSTRAINTS = ["A < 2"]\nos.system("false")\n'
    assert module_space(src) == {"A": [1, 2], "constraints": ["A < 2"]}
    assert module_space("def build(:\n") == {}


# --- summaries on verdicts from the real harness (no API, no broker) ----------------------------

@pytest.fixture(scope="module")
def harness_runs(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    from kernels.catalogue import get_slot
    from kernels.deployment import Deployment
    from workers.protocol import RunSpec
    from workers.sandbox import evaluate

    dep = Deployment(spec="tiny-moe", tp=1, batch_sizes=[1, 4])
    shape = next(s for s in get_slot("dense_gemm").shapes(dep) if s.name == "q_b_proj")
    data = tmp_path_factory.mktemp("harness")
    digest = hashlib.sha256(BROKEN.encode()).hexdigest()
    runs = []
    for i, (m, config) in enumerate([(1, {"BLOCK_M": 4, "BLOCK_N": 100}), (1, {"BLOCK_M": 4, "BLOCK_N": 64}),
                                     (4, {"BLOCK_M": 4, "BLOCK_N": 64})]):
        spec = RunSpec(run_id=f"r{i}", slot="dense_gemm", language="torch", source=BROKEN, source_hash=digest,
                       config=config, shape=shape.to_json(), m=m)
        result = evaluate(spec, data_dir=data).model_dump(mode="json")
        runs.append({**result, "shape_name": shape.name, "m": m, "config": config, "hardware": "cpu"})
    return runs


def test_summary_of_harness_verdicts(harness_runs: list[dict[str, Any]]) -> None:
    assert [r["verdict"] for r in harness_runs] == ["compile_failed", "check_failed", "passed"]
    s = summarize(harness_runs, source=BROKEN)
    assert s.by_verdict == {"check_failed": 1, "compile_failed": 1, "passed": 1}
    comp = next(g for g in s.failures if g.verdict == "compile_failed")
    assert comp.example.source_line == f"line {RAISE_LINE}: " + BROKEN.splitlines()[RAISE_LINE - 1].strip()
    assert "BLOCK_N=100" in (comp.example.reason or "")
    chk = next(g for g in s.failures if g.verdict == "check_failed")
    assert chk.reason_code == "unwritten_output" and chk.example.source_line is None
    assert len(chk.example.mismatches) == 3 and chk.example.mismatches[0].got is None
    assert any("fails only at M=1 (passes at M=4)" in h and "partial tiles" in h for h in s.hints), s.hints
    assert any("outputs left unwritten at M=1 (192 of 192 elements)" in h for h in s.hints), s.hints
    [cell] = s.speed
    assert cell.m == 4 and cell.speedup and cell.speedup_ci and cell.speedup_ci[0] <= cell.speedup <= cell.speedup_ci[1]
    # without the source the example still carries the line, in the reason
    bare = next(g for g in summarize(harness_runs).failures if g.verdict == "compile_failed")
    assert bare.example.source_line is None and f"(line {RAISE_LINE})" in (bare.example.reason or "")


def test_speed_hints_name_the_batch_sizes() -> None:
    """Slower-than-stock only at large M is told as a threshold, not a list."""
    def run(m: int, lo: float, hi: float) -> dict[str, Any]:
        sp = (lo + hi) / 2
        return {"id": f"r{m}", "shape_name": "o_proj", "m": m, "config": {"BLOCK_N": 64}, "verdict": "passed",
                "speedup": sp, "speedup_ci_lo": lo, "speedup_ci_hi": hi, "median_us": 10 / sp,
                "baseline_median_us": 10.0, "frac_of_floor": 0.8, "hardware": "h200"}
    runs = [run(1, 1.2, 1.3), run(4, 1.1, 1.2), run(32, 0.8, 0.9), run(64, 0.7, 0.8), run(16, 0.95, 1.05)]
    hints = summarize(runs).hints
    assert "o_proj: slower than stock at M>=32 (x0.75-0.85)" in hints, hints
    assert "o_proj: faster than stock at M<=4 (x1.15-1.25)" in hints, hints
    assert "o_proj: within noise of stock at M=16 (x1.00)" in hints, hints
    assert not any("CPU" in h for h in hints)


def test_displayed_ci_stays_on_its_side_of_one() -> None:
    """Rounded for an agent to read, but never across 1.0: beats_stock is decided on the exact lower bound
    (a CI of [1.0004, 1.2] beats stock, and must not read [1.0, 1.2]); seen as a CI flake of the MCP test."""
    assert ci_for_display(1.0004, 1.2) == (1.0004, 1.2)
    assert ci_for_display(0.9996, 1.00049) == (0.9996, 1.00049)
    assert ci_for_display(1.23456, 1.34567) == (1.235, 1.346)
    assert ci_for_display(1.0, 1.0) == (1.0, 1.0)
    assert ci_for_display(None, 1.2) is None


def test_a_chained_mismatch_tells_the_agent_what_to_wait_for() -> None:
    """The check stage's chained trial (workers/chain.py) fails a chained build that reads x before its wait: the
    agent is told that only weights may be loaded before griddepcontrol.wait (reason as session ZZ recorded it)."""
    reason = ("chained build (pdl=1), seed 2599263248: out: 1536 of 1536 elements NaN/Inf (unwritten outputs stay NaN); "
              "a chained kernel must read its activations (x) only after griddepcontrol.wait")
    runs = [{"id": f"r{m}", "shape_name": "q_b_proj", "m": m, "config": {"BLOCK_N": 8, "BLOCK_K": 256},
             "verdict": "check_failed", "reason_code": "chained_mismatch", "reason": reason, "hardware": "h100"}
            for m in (1, 4)]
    s = summarize(runs)
    assert [g.reason_code for g in s.failures] == ["chained_mismatch"]
    assert any("build(..., pdl=1)" in h and "griddepcontrol.wait" in h and "M in {1, 4}" in h for h in s.hints), s.hints
