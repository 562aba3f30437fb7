"""The head-to-head evidence of a tuning results file: every run of its jobs that a worker timed beside its
bucket's incumbent (workers/bench.py, RunSpec.control), read from the results' SQLite DB, with what it did to the
winners table. Writes <results stem>-controls.{json,md} beside the results file.

    python bench/control_report.py bench/results/<date>-<hw>-decode-tuning-<what>.json

Per run: its median, the incumbent's median in the same rounds and in the incumbent's own run (another session:
the difference is that session's clock), the ratio incumbent / challenger with its paired-bootstrap CI, the run's
ranked_us (its median in the incumbent's time base) and whether it holds its bucket now. "by median" says what
ranking by absolute median across sessions, as the table did before the control, would have decided.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, aliased

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from db.models import Run, Winner  # noqa: E402
from db.session import make_engine  # noqa: E402


def rows(session: Session, job_ids: list[int]) -> list[dict[str, Any]]:
    inc = aliased(Run)
    q = (select(Run, inc).join(inc, inc.id == Run.control_run_id)
         .where(Run.job_id.in_(job_ids), Run.status == "done", Run.verdict == "passed")
         .order_by(Run.slot, Run.shape_name, Run.m, Run.ranked_us))
    out = []
    for run, incumbent in session.execute(q):
        holder = session.scalar(select(Winner.run_id).where(
            Winner.slot == run.slot, Winner.shape_key == run.shape_key, Winner.batch_bucket == run.batch_bucket,
            Winner.hardware == run.hardware))
        out.append({
            "slot": run.slot, "shape": run.shape_name, "m": run.m, "run_id": run.id, "variant_id": run.variant_id,
            "config": run.config, "median_us": run.median_us, "control_error": (run.bench or {}).get("control_error"),
            "incumbent_run_id": incumbent.id, "incumbent_variant_id": incumbent.variant_id,
            "incumbent_config": incumbent.config, "incumbent_own_us": incumbent.median_us,
            "incumbent_here_us": run.control_median_us, "vs_control": run.vs_control,
            "vs_control_ci": [run.vs_control_ci_lo, run.vs_control_ci_hi], "ranked_us": run.ranked_us,
            "incumbent_ranked_us": incumbent.ranked_us, "speedup_ci_lo": run.speedup_ci_lo,
            "holds_bucket": holder == run.id,
            "by_median": "displaces" if (run.median_us or 0) < (incumbent.median_us or 0) else "keeps",
            "head_to_head": "displaces" if (run.ranked_us or 0) < (incumbent.ranked_us or 0) else "keeps",
            # ranked under the rule before a win had to clear the CI (db/queries/runs.py ranked_us, session 22)
            "within_noise": run.vs_control_ci_lo is not None and run.vs_control_ci_lo <= 1.0 < (run.vs_control or 0)})
    return out


def markdown(header: dict[str, Any], data: list[dict[str, Any]]) -> str:
    cfg = lambda c: ", ".join(f"{k}={v}" for k, v in sorted(c.items()))  # noqa: E731
    lines = [f"# Head to head: the runs of {header['what']} timed beside their bucket's incumbent", "",
             f"- date: {header['date']}; device: {header['device']}; commit: `{header['commit']}`",
             f"- tuning command: `{header['command']}`",
             f"- this file: `{header['report_command']}` (from the results' SQLite DB, commit `{header['report_commit']}`)",
             "- incumbent here / own: its median in the challenger's rounds / in its own run (another session); "
             "vs incumbent: incumbent / challenger in the same rounds, paired-bootstrap 95% CI; ranked: the challenger's "
             "median in the incumbent's time base; by median: what ranking by absolute medians across sessions decides",
             "", "| shape | M | challenger | us | incumbent | incumbent here / own us | vs incumbent [95% CI] | ranked us "
             "(incumbent's) | head to head | by median |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in data:
        lo, hi = r["vs_control_ci"]
        lines.append(
            f"| {r['shape']} | {r['m']} | v{r['variant_id']} {cfg(r['config'])} | {r['median_us']:.2f} | "
            f"v{r['incumbent_variant_id']} {cfg(r['incumbent_config'])} | {r['incumbent_here_us']:.2f} / "
            f"{r['incumbent_own_us']:.2f} | {r['vs_control']:.3f} [{lo:.3f}, {hi:.3f}] | {r['ranked_us']:.2f} "
            f"({r['incumbent_ranked_us']:.2f}) | **{r['head_to_head']}**"
            f"{' inside its CI (keeps, by the rule since 2026-12-06)' if r['within_noise'] and r['head_to_head'] == 'displaces' else ''}"
            f"{' (holds the bucket)' if r['holds_bucket'] else ''} "
            f"| {r['by_median']} |")
    flips = sum(r["head_to_head"] != r["by_median"] for r in data)
    drift = [r["incumbent_here_us"] / r["incumbent_own_us"] - 1 for r in data if r["incumbent_own_us"]]
    lines += ["", f"{len(data)} runs timed beside an incumbent; {sum(r['head_to_head'] == 'displaces' for r in data)} "
              f"displace it head to head; ranking by absolute median would decide {flips} of them the other way. "
              f"The incumbents' medians here differ from their own runs' by {min(drift):+.1%} to {max(drift):+.1%}."
              if data else "", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="a bench/service_tuning.py results JSON, its SQLite DB beside it")
    args = ap.parse_args()
    path = Path(args.results)
    table = json.loads(path.read_text())
    job_ids = [int(j["job_id"]) for j in table["jobs"] if j.get("job_id") is not None]
    # read only and immutable: the DB is a committed results file; a plain read-only open of a WAL-mode file
    # still leaves -shm and -wal files beside it
    engine = make_engine(f"sqlite:///file:{path.with_suffix('.sqlite').resolve()}?mode=ro&immutable=1&uri=true")
    with Session(engine) as session:
        data = rows(session, job_ids)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    header = {"what": table["what"], "date": table["date"], "device": table["device"], "commit": table["commit"],
              "command": table["command"], "report_command": " ".join(["bench/control_report.py", *sys.argv[1:]]),
              "report_commit": commit}
    out = path.with_name(path.stem + "-controls")
    out.with_suffix(".json").write_text(json.dumps({**header, "runs": data}, indent=1, default=str) + "\n")
    out.with_suffix(".md").write_text(markdown(header, data))
    print(out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
