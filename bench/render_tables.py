"""Rebuild the Markdown table beside a results JSON (device sessions bring back only the JSON: the
device returns at most 8 files). Picks the renderer by the file's producer.

    python bench/render_tables.py bench/results/2026-12-03-h200-dense-gemm-triton.json ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pipeline_runs  # noqa: E402
import service_tuning  # noqa: E402


def _latency_floor_markdown(data: dict) -> str:
    import latency_floor  # imports triton: only when such a file is rendered

    return latency_floor.markdown(data)


def render(path: Path) -> Path:
    data = json.loads(path.read_text())
    what = str(data.get("what", ""))
    if what.startswith("kerneltune pipeline runs"):
        text = pipeline_runs.markdown(data, data["rows"])
    elif what.startswith("kerneltune service tuning"):
        # the summary again from the winners and leaderboard the file holds: a column added since (the winner's
        # ratio to the incumbent it displaced) is filled from the evidence the file already has
        text = service_tuning.markdown(data, service_tuning.summarise(data["winners"], data["leaderboard"]))
    elif str(data.get("header", {}).get("command", "")).startswith("bench/latency_floor.py"):
        text = _latency_floor_markdown(data)
    else:
        raise SystemExit(f"{path}: no table renderer for {what!r}")
    out = path.with_suffix(".md")
    out.write_text(text)
    return out


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(render(Path(arg)))
