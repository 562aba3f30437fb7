"""The dashboard in headless Chromium against a real running service: the embedded stack (API +
Celery worker + sandboxed evaluations on this machine's CPU), data submitted through the REST API.

Needs Debian's chromium (apt-get install chromium) and the playwright Python package (its API only:
no `playwright install`). Screenshots go to /tmp/kerneltune-dashboard*.png for a human to look at.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kernels.deployment import spans
from service.cli import app as cli
from service.client import Client
from service.embedded import EmbeddedStack
from support.servers import free_port

SHIPPED = Path(__file__).resolve().parents[1] / "kernels" / "variants" / "torch" / "dense_gemm_matmul.py"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
DEPLOY = {"spec": "tiny-moe", "tp": 1, "batch_sizes": [1, 2, 4]}
SCREENSHOTS = Path("/tmp")


def _wait_done(client: Client, job_id: int, timeout_s: float = 420) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        job = client.get(f"/v1/jobs/{job_id}")
        if job["state"] in ("done", "cancelled"):
            return job
        assert time.monotonic() < deadline, f"job {job_id} not done: {job['progress']}"
        time.sleep(0.25)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    st = EmbeddedStack(tmp_path_factory.mktemp("kt-dash"), port=free_port())
    try:
        st.start()
        yield st
    finally:
        st.stop()


@pytest.fixture(scope="module")
def populated(stack: EmbeddedStack) -> dict[str, Any]:
    """Two variants (the shipped one and a child of it), evaluated by the real worker."""
    admin = stack.client()
    source = SHIPPED.read_text()
    parent = admin.post("/v1/variants", {"slot": "dense_gemm", "language": "torch", "source": source,
                                         "config_space": {"n_chunks": [1, 2]}, "provenance": {"author": "alice"}})
    child_src = source.replace("step = n // n_chunks", "step = n // n_chunks  # one chunk per split")
    child = admin.post("/v1/variants", {"slot": "dense_gemm", "language": "torch", "source": child_src,
                                        "config_space": {"n_chunks": [1, 2]},
                                        "provenance": {"author": "bob", "agent": "agent-x", "parent_id": parent["id"]}})
    jobs = [admin.post("/v1/jobs", {"variant_id": v["id"], "deployment": DEPLOY, "shapes": ["o_proj"],
                                    "configs": [{"n_chunks": n}]})["job"]["id"]
            for v, n in ((parent, 1), (child, 2))]
    finals = [_wait_done(admin, j) for j in jobs]
    board = admin.get("/v1/leaderboard", slot="dense_gemm", per_group=50)
    return {"parent": parent["id"], "child": child["id"], "jobs": jobs, "finals": finals, "board": board}


def test_cli_creates_tokens_through_the_api(stack: EmbeddedStack) -> None:
    env = {"KT_API_URL": stack.url, "KT_TOKEN": stack.admin_token}
    out = CliRunner().invoke(cli, ["tokens", "create", "--name", "viewer", "--scopes", "read",
                                   "--gpu-seconds-per-day", "3600", "--max-concurrent-jobs", "4"], env=env)
    assert out.exit_code == 0, out.output
    secret = out.output.strip().splitlines()[-1]
    me = Client(stack.url, token=secret).get("/v1/tokens/me")
    assert (me["token"]["name"], me["token"]["scopes"], me["token"]["max_concurrent_jobs"]) == ("viewer", ["read"], 4)
    listed = CliRunner().invoke(cli, ["tokens", "list"], env=env)
    assert listed.exit_code == 0 and "viewer" in listed.output and secret not in listed.output
    refused = CliRunner().invoke(cli, ["tokens", "list"], env={**env, "KT_TOKEN": secret})
    assert refused.exit_code == 1 and "admin" in refused.output


def _browser() -> Any:
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (see .ci/run)")
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed: apt-get install -y chromium (see .ci/run)")
    return sync_api.sync_playwright()


def test_dashboard_shows_real_results(stack: EmbeddedStack, populated: dict[str, Any]) -> None:
    assert all(f["state"] == "done" for f in populated["finals"]), populated["finals"]
    groups = populated["board"]
    assert groups, "the worker produced no passing run: nothing to plot"
    entries = sum(len(g["entries"]) for g in groups)
    speedup_points = len({(e["variant_id"], g["shape_name"], g["m"]) for g in groups for e in g["entries"]})
    reader = Client(stack.url, token=stack.admin_token).post(
        "/v1/tokens", {"name": "dash-reader", "scopes": ["read"]})["secret"]

    with _browser() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            problems: list[str] = []
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.add_init_script(f"localStorage.setItem('kerneltune.token', {reader!r})")
            page.goto(f"{stack.url}/", wait_until="domcontentloaded")

            page.wait_for_function("document.querySelectorAll('#leaderboard tbody tr.entry').length > 0", timeout=30_000)
            page.wait_for_function("document.querySelectorAll('#speedup-chart circle.pt').length > 0", timeout=30_000)
            page.wait_for_function("document.querySelectorAll('#diff span.add').length > 0", timeout=30_000)
            rows = page.locator("#leaderboard tbody tr.entry").count()
            assert rows == min(entries, sum(min(5, len(g["entries"])) for g in groups)) > 0
            assert page.locator("#speedup-chart circle.pt").count() == speedup_points
            # roofline: best and stock per (shape, M), and the floor where the run measured one
            roof = page.locator("#roofline-chart circle.pt").count()
            assert roof >= 2 * len(groups), roof
            ys = [float(y) for y in page.locator("#speedup-chart circle.pt").evaluate_all(
                "els => els.map(e => e.dataset.y)")]
            assert sorted(ys) == sorted(max(e["speedup"] for e in g["entries"] if e["variant_id"] == v)
                                        for g in groups for v in {e["variant_id"] for e in g["entries"]})
            assert "No search has reported results yet" in page.locator("#search-chart").inner_text()
            # winners of the selected slot, each with the batch sizes of its bucket that no run checked (the jobs ran
            # M = 1, 2, 4: a tuned winner of bucket 3-4 serves M = 3 unchecked; whether one beats stock is the CPU's say)
            slot = page.locator("#slot-select").input_value()
            won = [w for w in Client(stack.url, token=reader).get("/v1/winners") if w["slot"] == slot]
            page.wait_for_function(f"document.querySelectorAll('#winners tbody tr').length === {len(won)}",
                                   timeout=30_000)
            for w in won:
                row = page.locator(f"#winners tbody tr[data-bucket='{w['shape_name']} {w['batch_bucket']} {w['hardware']}']")
                if w["is_stock"]:
                    assert "stock" in row.inner_text()
                    continue
                want = spans(w["evidence"]["unchecked_ms"]) or "-"
                assert row.locator("td.unchecked-m").inner_text() == want, (w, row.inner_text())
            assert page.locator("#winners td.unchecked-m.open").count() == sum(
                1 for w in won if not w["is_stock"] and w["evidence"]["unchecked_ms"])
            diff = page.locator("#diff").inner_text()
            assert "+    step = n // n_chunks  # one chunk per split" in diff and "-    step = n // n_chunks\n" in diff
            jobs_text = page.locator("#jobs tbody").inner_text()
            assert all(str(j) in jobs_text for j in populated["jobs"]) and "done" in jobs_text
            assert "dash-reader (read)" in page.locator("#whoami").inner_text()
            hint = page.locator("#token-hint").inner_text()
            html = page.content()
            assert str(stack.admin_token_file) in hint and stack.admin_token not in html and reader not in html
            page.screenshot(path=str(SCREENSHOTS / "kerneltune-dashboard.png"), full_page=True)

            # live progress: a job submitted now shows up through polling, without a reload
            admin = stack.client()
            new = admin.post("/v1/jobs", {"variant_id": populated["parent"], "deployment": DEPLOY,
                                          "shapes": ["o_proj"], "configs": [{"n_chunks": 2}]})["job"]["id"]
            page.wait_for_selector(f"#jobs tbody tr[data-job-id='{new}']", timeout=15_000)
            _wait_done(admin, new)
            page.wait_for_function(
                f"document.querySelector(\"#jobs tbody tr[data-job-id='{new}'] .state-done\") !== null", timeout=15_000)
            page.screenshot(path=str(SCREENSHOTS / "kerneltune-dashboard-live.png"), full_page=True)
            assert problems == []

            # no token: the page says so, fetches nothing, logs no errors
            fresh = browser.new_context().new_page()
            fresh_problems: list[str] = []
            fresh.on("console", lambda m: fresh_problems.append(m.text) if m.type == "error" else None)
            fresh.on("pageerror", lambda e: fresh_problems.append(str(e)))
            fresh.goto(f"{stack.url}/dashboard")
            fresh.wait_for_function("document.getElementById('whoami').textContent.includes('no token')")
            assert fresh.locator("#leaderboard tbody tr").count() == 0 and fresh_problems == []
            fresh.screenshot(path=str(SCREENSHOTS / "kerneltune-dashboard-no-token.png"))
        finally:
            browser.close()
