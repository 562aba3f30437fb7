"""`kerneltune`: the command line. A plain HTTP client of the API, plus commands that start
the API (`serve`), a worker (`worker`) or both on the embedded default (`up`, `demo`)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kernels.deployment import spans
from kernels.variant_meta import declared_space
from service.client import ApiError, Client
from service.embedded import (EmbeddedStack, StackError, api_command, default_data_dir, embedded_env,
                              exit_on_sigterm, worker_command)

app = typer.Typer(help="kerneltune: submit, check, time and rank decode-path kernels.", no_args_is_help=True)
# A pipe or a log file gets wide tables rather than rich's 80-column default.
console = Console() if sys.stdout.isatty() else Console(width=180)

ApiOpt = typer.Option(None, "--api", help="API base URL (default $KT_API_URL or http://127.0.0.1:8765)")
SHIPPED = Path(__file__).resolve().parent.parent / "kernels" / "variants"


def _client(api: str | None) -> Client:
    return Client(api)


def _fail(exc: ApiError | StackError) -> None:
    console.print(f"[red]error:[/red] {exc.detail if isinstance(exc, ApiError) else exc}")
    raise typer.Exit(1)


def _fmt(v: Any, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


# --- starting things -------------------------------------------------------------------------

@app.command()
def serve(host: str = "127.0.0.1", port: int = 8765,
          workers: int = typer.Option(1, min=1, help="API processes (one per core; with PostgreSQL, not SQLite)")) -> None:
    """Run the API server (reads KT_DATABASE_URL, KT_BROKER_URL, KT_DATA_DIR)."""
    os.execvpe(sys.executable, api_command(host, port, workers), embedded_env(default_data_dir()))


@app.command()
def worker(hardware: str = typer.Option("cpu", help="hardware class: the queue kt.<hardware> it serves"),
           device: str = typer.Option("cpu", help="device this worker evaluates on: cpu, cuda, cuda:N")) -> None:
    """Run one worker (one per GPU) on the queue of its hardware class."""
    env = embedded_env(default_data_dir(), {"KT_DEVICE": device})
    os.execvpe(sys.executable, worker_command(hardware), env)


@app.command()
def up(port: int = 8765, data_dir: Optional[Path] = typer.Option(None, help="default ~/.kerneltune"),
       workers: int = 1) -> None:
    """Start the embedded service (SQLite + no-server broker) with local workers; Ctrl-C stops it."""
    stack = EmbeddedStack(data_dir or default_data_dir(), port=port, workers=workers)
    exit_on_sigterm()  # `kill` stops the stack too, as Ctrl-C does
    try:
        with console.status("starting API and worker..."):
            stack.start()
        console.print(f"kerneltune is up at [bold]{stack.url}[/bold] (data in {stack.data_dir}); Ctrl-C to stop")
        _print_token_file(stack)
        signal.pause()
    except StackError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        pass
    finally:
        stack.stop()


def _print_token_file(stack: EmbeddedStack) -> None:
    word = "created" if stack.admin_token_created else "in"
    console.print(f"local admin token {word} {stack.admin_token_file} (mode 0600); dashboard at {stack.url}/ ; "
                  f"for the CLI: export KT_TOKEN=$(cat {stack.admin_token_file})")


# --- API tokens (admin) ----------------------------------------------------------------------

tokens_app = typer.Typer(help="API tokens: create, list, revoke (needs an admin token: $KT_TOKEN or "
                              "<data_dir>/admin-token).", no_args_is_help=True)
app.add_typer(tokens_app, name="tokens")


@tokens_app.command("create")
def tokens_create(name: str = typer.Option(..., help="user or agent name"),
                  scopes: str = typer.Option("read", help="comma-separated: read, submit, export, admin"),
                  gpu_seconds_per_day: Optional[float] = typer.Option(None, help="daily GPU-seconds quota"),
                  max_concurrent_jobs: Optional[int] = typer.Option(None, help="queued + running jobs at once"),
                  api: Optional[str] = ApiOpt) -> None:
    """Create a token; its secret is printed once (only its hash is stored)."""
    body = {"name": name, "scopes": [s.strip() for s in scopes.split(",") if s.strip()],
            "gpu_seconds_per_day": gpu_seconds_per_day, "max_concurrent_jobs": max_concurrent_jobs}
    try:
        out = _client(api).post("/v1/tokens", body)
    except ApiError as exc:
        _fail(exc)
    console.print(f"token [bold]{out['name']}[/bold] ({', '.join(out['scopes'])}); the secret, shown once:",
                  highlight=False)
    print(out["secret"])  # plain stdout: scripts capture it with $(kerneltune tokens create ...)


@tokens_app.command("list")
def tokens_list(api: Optional[str] = ApiOpt) -> None:
    """Every token with its scopes and quotas (never the secrets)."""
    try:
        rows = _client(api).get("/v1/tokens")
    except ApiError as exc:
        _fail(exc)
    t = Table(title="API tokens")
    for col in ("name", "prefix", "scopes", "GPU-s/day", "max jobs", "last used", "revoked"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["name"], r["prefix"] + "…", ",".join(r["scopes"]), _fmt(r.get("gpu_seconds_per_day"), ".0f"),
                  str(r.get("max_concurrent_jobs") or "-"), str(r.get("last_used_at") or "-"),
                  "yes" if r["revoked"] else "")
    console.print(t)


@tokens_app.command("revoke")
def tokens_revoke(name: str, api: Optional[str] = ApiOpt) -> None:
    """Revoke a token: its secret stops working at once."""
    try:
        _client(api).post(f"/v1/tokens/{name}/revoke")
    except ApiError as exc:
        _fail(exc)
    console.print(f"token {name} revoked")


# --- variants and jobs -----------------------------------------------------------------------

def _read_space(space: str | None) -> dict[str, Any] | None:
    if space is None:
        return None
    text = Path(space[1:]).read_text() if space.startswith("@") else space
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        console.print(f"[red]error:[/red] --space is not valid JSON: {exc}")
        raise typer.Exit(2)


def submit_variant(client: Client, file: Path, slot: str, language: str, space: dict[str, Any] | None,
                   author: str, agent: str | None = None, parent: str | None = None, notes: str = "") -> dict[str, Any]:
    source = file.read_text()
    space = space if space is not None else (declared_space(source) or {})
    return client.post("/v1/variants", {
        "slot": slot, "language": language, "source": source, "config_space": space,
        "provenance": {"author": author, "agent": agent, "parent_id": parent, "notes": notes},
    })


@app.command()
def submit(file: Path = typer.Argument(..., exists=True, readable=True),
           slot: str = typer.Option(...), language: str = "torch",
           space: Optional[str] = typer.Option(None, help="JSON or @file; default: the module's CONFIG_SPACE"),
           author: str = typer.Option(os.environ.get("USER", "anonymous")), agent: Optional[str] = None,
           parent: Optional[str] = None, notes: str = "", api: Optional[str] = ApiOpt) -> None:
    """Submit a variant module (defines build(config, shape))."""
    try:
        out = submit_variant(_client(api), file, slot, language, _read_space(space), author, agent, parent, notes)
    except ApiError as exc:
        _fail(exc)
    word = "new variant" if out.get("created") else "already known"
    console.print(f"{word} [bold]{out['id']}[/bold] sha256 {out['content_hash'][:16]}")


def _job_body(variant: int | str, model: str, tp: int, batches: str, hardware: str, configs: str,
              shapes: str | None, drafts: int) -> dict[str, Any]:
    deployment: dict[str, Any] = {"tp": tp, "batch_sizes": [int(b) for b in batches.split(",")], "draft_tokens": drafts}
    if model.endswith(".json") and Path(model).exists():
        deployment["spec"] = json.loads(Path(model).read_text())
    else:
        deployment["spec"] = model
    body: dict[str, Any] = {"variant_id": variant, "deployment": deployment, "hardware": hardware,
                            "configs": "all" if configs == "all" else json.loads(configs)}
    if shapes:
        body["shapes"] = shapes.split(",")
    return body


@app.command()
def evaluate(variant: str, model: str = typer.Option("kimi-k2-like", help="built-in spec name or a HF config.json path"),
             tp: int = 8, batches: str = "1,2,4,8,16,32,64", hardware: str = "cpu",
             configs: str = typer.Option("all", help="'all' or a JSON list of configs"),
             shapes: Optional[str] = typer.Option(None, help="comma-separated shape names"),
             drafts: int = 0, wait: bool = True, api: Optional[str] = ApiOpt) -> None:
    """Start an evaluation job of a variant over a deployment."""
    client = _client(api)
    try:
        created = client.post("/v1/jobs", _job_body(variant, model, tp, batches, hardware, configs, shapes, drafts))
    except ApiError as exc:
        _fail(exc)
    job = created["job"]
    console.print(f"job [bold]{job['id']}[/bold]: {created['runs']} runs on {job['queue']}")
    if not created["enqueued"]:
        console.print(f"[yellow]not enqueued yet[/yellow] ({created.get('enqueue_error')}); the sweeper retries")
    if wait:
        watch_job(client, job["id"])


def watch_job(client: Client, job_id: int | str, timeout_s: float | None = None) -> dict[str, Any]:
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[verdicts]}"), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task(f"job {job_id}", total=None, verdicts="")
        while True:
            job = client.get(f"/v1/jobs/{job_id}")
            prog = job["progress"]
            verdicts = " ".join(f"{k}={v}" for k, v in sorted(prog.get("by_verdict", {}).items()))
            bar.update(task, total=prog["total"], completed=prog["done"], verdicts=verdicts)
            if job["state"] in ("done", "cancelled"):
                return job
            if deadline is not None and time.monotonic() > deadline:
                raise ApiError(0, f"job {job_id} not finished after {timeout_s:.0f} s ({prog['done']}/{prog['total']})")
            time.sleep(0.5)


@app.command()
def status(job: str, api: Optional[str] = ApiOpt) -> None:
    """Live progress of a job until it is done."""
    try:
        final = watch_job(_client(api), job)
    except ApiError as exc:
        _fail(exc)
    console.print(f"job {job}: {final['state']}")


@app.command()
def cancel(job: str, api: Optional[str] = ApiOpt) -> None:
    """Cancel a job's queued runs."""
    try:
        out = _client(api).post(f"/v1/jobs/{job}/cancel")
    except ApiError as exc:
        _fail(exc)
    console.print(f"job {job}: {out['state']}")


@app.command()
def runs(job: str, verdict: Optional[str] = None, api: Optional[str] = ApiOpt) -> None:
    """Every run of a job with its verdicts and numbers."""
    try:
        rows = _client(api).get(f"/v1/jobs/{job}/runs", verdict=verdict)
    except ApiError as exc:
        _fail(exc)
    t = Table(title=f"runs of job {job}")
    for col in ("shape", "M", "config", "status", "verdict", "us", "stock us", "speedup", "95% CI", "reason"):
        t.add_column(col)
    for r in rows:
        ci = "-" if r.get("speedup_ci_lo") is None else f"{r['speedup_ci_lo']:.2f}-{r['speedup_ci_hi']:.2f}"
        t.add_row(r["shape_name"], str(r["m"]), json.dumps(r["config"], separators=(",", ":")), r["status"],
                  r.get("verdict") or "-", _fmt(r.get("median_us")), _fmt(r.get("baseline_median_us")),
                  _fmt(r.get("speedup"), ".3f"), ci, (r.get("reason") or "")[:60])
    console.print(t)


def print_leaderboard(groups: list[dict[str, Any]]) -> None:
    t = Table(title="leaderboard (passing runs; speedup vs stock measured in the same run)")
    for col in ("slot", "shape", "M", "rank", "variant", "config", "us", "stock us", "speedup", "95% CI",
                "of floor", "lib"):
        t.add_column(col)
    for g in groups:
        for e in g["entries"]:
            ci = "-" if e.get("speedup_ci_lo") is None else f"{e['speedup_ci_lo']:.2f}-{e['speedup_ci_hi']:.2f}"
            floor = "-" if e.get("frac_of_floor") is None else f"{100 * e['frac_of_floor']:.1f}%"
            t.add_row(g["slot"], g["shape_name"], str(g["m"]), str(e["rank"]),
                      f"{e['variant_id']} ({e['language']})", json.dumps(e["config"], separators=(",", ":")),
                      _fmt(e.get("median_us")), _fmt(e.get("baseline_median_us")), _fmt(e.get("speedup"), ".3f"),
                      ci, floor, "yes" if e.get("uses_library") else "")
    console.print(t)


@app.command()
def leaderboard(slot: Optional[str] = None, hardware: Optional[str] = None, model: Optional[str] = None,
                top: int = 3, api: Optional[str] = ApiOpt) -> None:
    """Passing runs ranked per (shape, batch)."""
    try:
        board = _client(api).get("/v1/leaderboard", slot=slot, hardware=hardware, model=model, per_group=top)
    except ApiError as exc:
        _fail(exc)
    print_leaderboard(board)


@app.command()
def winners(slot: Optional[str] = None, hardware: Optional[str] = None, api: Optional[str] = ApiOpt) -> None:
    """The current winner per (slot, shape, batch bucket, hardware) with its evidence."""
    try:
        rows = _client(api).get("/v1/winners", slot=slot, hardware=hardware)
    except ApiError as exc:
        _fail(exc)
    t = Table(title="winners")
    for col in ("slot", "shape", "bucket", "hardware", "winner", "config", "us", "speedup", "95% CI", "unchecked M",
                "slower M"):
        t.add_column(col)
    for w in rows:
        if w.get("is_stock"):
            t.add_row(w["slot"], w["shape_name"], w["batch_bucket"], w["hardware"], "stock", "-", "-", "1.000", "-", "-",
                      "-")
            continue
        ev = w.get("evidence") or {}
        ci = "-" if ev.get("speedup_ci_lo") is None else f"{ev['speedup_ci_lo']:.2f}-{ev['speedup_ci_hi']:.2f}"
        t.add_row(w["slot"], w["shape_name"], w["batch_bucket"], w["hardware"], str(ev.get("variant_id")),
                  json.dumps(ev.get("config"), separators=(",", ":")), _fmt(ev.get("median_us")),
                  _fmt(ev.get("speedup"), ".3f"), ci, spans(ev.get("unchecked_ms") or []) or "-",
                  spans(ev.get("slower_ms") or []) or "-")
    console.print(t)
    if any((w.get("evidence") or {}).get("unchecked_ms") for w in rows):
        console.print("unchecked M: batch sizes a winner's bucket serves that no run checked; "
                      "`kerneltune bucket-checks` checks them")
    if any((w.get("evidence") or {}).get("slower_ms") for w in rows):
        console.print("slower M: batch sizes where a winner was measured slower than stock; an export serves stock there")


@app.command("bucket-checks")
def bucket_checks_cmd(hardware: str = typer.Option(..., help="hardware class of the winners, e.g. h200"),
                      model: str = typer.Option("kimi-k2-like"), api: Optional[str] = ApiOpt) -> None:
    """Check each winner at the batch sizes of its bucket that no run measured (short runs on the workers)."""
    try:
        res = _client(api).post("/v1/winners/bucket-checks", {"hardware": hardware, "model": model})
    except ApiError as exc:
        _fail(exc)
    console.print(f"{res['entries']} winners to check: {res['runs']} runs in jobs "
                  f"{', '.join(str(j['job']['id']) for j in res['jobs']) or '-'} (`kerneltune status JOB` follows one)")


@app.command("export")
def export_cmd(hardware: str = typer.Option(..., help="hardware class the winners were measured on, e.g. h200"),
               model: str = typer.Option("kimi-k2-like"), allow_partial: bool = False, version: str = "0.1.0",
               every_m: bool = typer.Option(False, help="only winners checked at every batch size their bucket serves"),
               aot: bool = typer.Option(True, help="compile the CuTe DSL entries ahead of time (nothing JIT-compiles "
                                                   "when vLLM starts)"),
               out: Path = typer.Option(Path("."), help="folder the wheel is written to"),
               api: Optional[str] = ApiOpt) -> None:
    """Export the winners as an installable vLLM latency_specialized wheel."""
    client = _client(api)
    try:
        res = client.post("/v1/exports", {"hardware": hardware, "model": model, "allow_partial": allow_partial,
                                          "version": version, "every_m": every_m, "aot": aot})
        out.mkdir(parents=True, exist_ok=True)
        client.download(f"/v1/exports/{res['export_id']}/wheel", out / res["wheel_filename"])
    except ApiError as exc:
        _fail(exc)
    console.print(f"wrote {out / res['wheel_filename']} (sha256 {res['sha256'][:16]}, {res['entries']} entries, "
                  f"{res['stock_entries']} stock)" + (f"; skipped {len(res['skipped'])}" if res["skipped"] else ""))
    for p in res["skipped"]:
        console.print(f"  skipped {p['slot']} {p['shape_key']} {p['bucket']}: {p['reason']}")
    gaps: dict[str, list[str]] = {}
    for p in res.get("untuned", []):
        gaps.setdefault(f"{p['slot']} {p['shape_key']}", []).append(p["bucket"])
    for shape, buckets in gaps.items():
        console.print(f"  never timed, runs stock: {shape} buckets {', '.join(buckets)}")
    built = res.get("aot") or {}
    if built.get("builds"):
        console.print(f"  {built['builds']} CuTe DSL kernels compiled ahead of time for {built['arch']} "
                      f"({built.get('chained', 0)} of them chained, for KT_LS_PDL=1/2)")
    for p in built.get("skipped", []):
        console.print(f"  JIT on the target: {p['slot']} {p['shape_key']} {p['bucket']}: {p['reason']}")
    for p in res.get("slower", []):
        console.print(f"  stock at part of a bucket: {p['slot']} {p['shape_key']} {p['bucket']}: {p['reason']}")
    if res.get("unchecked"):
        console.print(f"  {len(res['unchecked'])} tuned entries serve batch sizes their runs did not check: "
                      f"`python -m {res['package']}.selftest --every-m` checks them on the machine it runs on")


# --- the main job on the embedded default ------------------------------------------------------

@app.command()
def demo(port: int = 8765, data_dir: Optional[Path] = typer.Option(None, help="default ./.kerneltune/demo"),
         shapes: str = typer.Option("q_b_proj,o_proj", help="dense_gemm shapes to evaluate"),
         batches: str = "1,2,4,8,16,32,64", keep_running: bool = False) -> None:
    """Start the embedded service and a CPU worker, submit the shipped torch dense_gemm variant
    through the REST API, evaluate it at every batch size, and print the leaderboard."""
    t0 = time.monotonic()
    stack = EmbeddedStack(data_dir or Path.cwd() / ".kerneltune" / "demo", port=port)
    exit_on_sigterm()
    try:
        with console.status("starting the embedded service (SQLite, filesystem broker) and a CPU worker..."):
            stack.start()
        console.print(f"service at {stack.url}, data in {stack.data_dir}")
        _print_token_file(stack)
        client = stack.client()
        variant = submit_variant(client, SHIPPED / "torch" / "dense_gemm_matmul.py", "dense_gemm", "torch",
                                 None, author="kerneltune-demo", notes="shipped torch variant")
        console.print(f"variant {variant['id']} submitted (sha256 {variant['content_hash'][:12]})")
        created = client.post("/v1/jobs", _job_body(variant["id"], "kimi-k2-like", 8, batches, "cpu", "all", shapes, 0))
        job = created["job"]
        console.print(f"job {job['id']}: {created['runs']} runs")
        final = watch_job(client, job["id"], timeout_s=1800)
        print_leaderboard(client.get("/v1/leaderboard", slot="dense_gemm", hardware="cpu", per_group=3))
        done = final["progress"]["done"]
        secs = time.monotonic() - t0
        console.print(f"demo finished in {secs:.0f} s: {done} runs, "
                      f"{final['progress'].get('by_verdict', {})}")
        if keep_running:
            console.print("service still running; Ctrl-C to stop")
            signal.pause()
    except (ApiError, StackError) as exc:
        _fail(exc)
    except KeyboardInterrupt:
        pass
    finally:
        stack.stop()


# --- config searches ------------------------------------------------------------------------------

def watch_search(client: Client, search_id: int | str, timeout_s: float | None = None) -> dict[str, Any]:
    """A progress bar over the search's evaluations (out of the budget, or of the valid points) until
    it ends; the description shows the best so far."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[best]}"), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task(f"search {search_id}", total=None, best="")
        while True:
            s = client.get(f"/v1/searches/{search_id}")
            max_evals = (s.get("budget") or {}).get("max_evals")
            total = sum(min(max_evals or t["valid_points"], t["valid_points"]) for t in s["targets"])
            bests = [f"{t['label']}: {t['best']['median_us']:.2f} us" for t in s["targets"] if t.get("best")]
            bar.update(task, total=total, completed=s["evaluations"],
                       best=f"in flight {s['in_flight']}  best " + ("; ".join(bests) or "-"))
            if s["state"] in ("done", "cancelled", "failed"):
                return s
            if deadline is not None and time.monotonic() > deadline:
                raise ApiError(0, f"search {search_id} not finished after {timeout_s:.0f} s")
            time.sleep(0.5)


def print_search(s: dict[str, Any]) -> None:
    t = Table(title=f"search {s['id']} ({s['strategy']}, {s['state']})")
    for col in ("target", "evals", "of points", "failed", "best config", "us", "speedup", "stop reason"):
        t.add_column(col)
    for tg in s["targets"]:
        best = tg.get("best") or {}
        t.add_row(tg["label"], str(tg["evaluations"]), str(tg["valid_points"]), str(tg["failed"]),
                  json.dumps(best.get("config"), separators=(",", ":")) if best else "-",
                  _fmt(best.get("median_us")), _fmt(best.get("speedup"), ".3f"), tg.get("stop_reason") or "-")
    console.print(t)
    if s.get("error"):
        console.print(f"[red]error:[/red] {s['error']}")


def _strategy_options(pairs: list[str]) -> dict[str, Any]:
    """KEY=VALUE pairs, a number where the value reads as one (the API names the unknown keys)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{pair!r}: expected KEY=VALUE", param_hint="--option")
        value: Any = raw
        for cast in (int, float):
            try:
                value = cast(raw)
                break
            except ValueError:
                continue
        out[key.strip()] = value
    return out


@app.command()
def search(variant: str, model: str = typer.Option("kimi-k2-like", help="built-in spec name or a HF config.json path"),
           tp: int = 8, batches: str = "1,2,4,8,16,32,64", hardware: str = "cpu",
           shapes: Optional[str] = typer.Option(None, help="comma-separated shape names"), drafts: int = 0,
           strategy: str = typer.Option("tpe", help="exhaustive, random, tpe, successive_halving, transfer"),
           max_evals: Optional[int] = typer.Option(None, help="evaluations per target"),
           max_gpu_seconds: Optional[float] = typer.Option(None, help="device seconds per target"),
           patience: Optional[int] = typer.Option(None, help="stop after this many evaluations without improving"),
           batch_size: Optional[int] = typer.Option(None, help="configs in flight per target (default: workers or 4)"),
           per: str = typer.Option("m", help="one sub-search per M ('m') or per batch bucket ('bucket')"),
           option: list[str] = typer.Option([], "--option", "-o",
                                            help="a strategy option KEY=VALUE, repeatable (e.g. local_per_round=2)"),
           seed: int = 0, wait: bool = True, api: Optional[str] = ApiOpt) -> None:
    """Search a variant's config space with a strategy and a budget, spread over the queue's workers."""
    options = _strategy_options(option)
    client = _client(api)
    job = _job_body(variant, model, tp, batches, hardware, "all", shapes, drafts)
    body: dict[str, Any] = {"variant_id": job["variant_id"], "deployment": job["deployment"], "hardware": hardware,
                            "shapes": job.get("shapes"), "strategy": strategy, "per": per, "seed": seed,
                            "batch_size": batch_size, "options": options,
                            "budget": {"max_evals": max_evals, "patience": patience, "max_gpu_seconds": max_gpu_seconds}}
    try:
        s = client.post("/v1/searches", body)
        console.print(f"search [bold]{s['id']}[/bold]: {len(s['targets'])} targets, batch size {s['batch_size']} on "
                      f"{s['queue']}")
        if s.get("enqueue_error"):
            console.print(f"[yellow]driver not started yet[/yellow] ({s['enqueue_error']}); the sweeper retries")
        if wait:
            print_search(watch_search(client, s["id"]))
    except ApiError as exc:
        _fail(exc)


@app.command("search-status")
def search_status(search_id: str, wait: bool = True, api: Optional[str] = ApiOpt) -> None:
    """A search's progress (live bar until it ends with --wait), then its best config per target."""
    client = _client(api)
    try:
        print_search(watch_search(client, search_id) if wait else client.get(f"/v1/searches/{search_id}"))
    except ApiError as exc:
        _fail(exc)


@app.command("search-cancel")
def search_cancel(search_id: str, api: Optional[str] = ApiOpt) -> None:
    """Stop a search: its queued runs are cancelled, running ones finish."""
    try:
        out = _client(api).post(f"/v1/searches/{search_id}/cancel")
    except ApiError as exc:
        _fail(exc)
    console.print(f"search {search_id}: {out['search']['state']} ({out['cancelled_runs']} runs cancelled)")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
