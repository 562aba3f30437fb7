"""Writes session 34's H200 plan: the items of s29_h200.json that session 33's cut tuning step did not finish.

That step (bench/session_s29c.sh on the H200) submitted the plan's 68 items in order, one job each (jobs 113-180 of the
s25 table's DB), and cancelled the jobs still pending at its deadline; its log names both. The items whose jobs were
cancelled go to bench/plans/s34_h200.json, in the plan's order (the table these would extend, decode-tuning-s33, holds
the finished ones). Run from the repo root.
"""

import json
import re
from pathlib import Path

PLAN = Path("bench/plans/s29_h200.json")
LOG = Path("bench/results/2026-12-07-h200-session-s33-tuning-cut.log")


def cancelled_items(plan: dict, log: str) -> list[dict]:
    submitted = [(m.group(1), int(m.group(2))) for m in re.finditer(r"^submitted (\S+): variant \d+ job (\d+)", log, re.M)]
    if [f for f, _ in submitted] != [item["file"] for item in plan["variants"]]:
        raise SystemExit("the log's submissions are not the plan's items in order")
    cancelled = {int(j) for j in re.findall(r"^/v1/jobs/(\d+) cancelled at the deadline", log, re.M)}
    return [item for item, (_, job) in zip(plan["variants"], submitted) if job in cancelled]


if __name__ == "__main__":
    plan = json.loads(PLAN.read_text())
    items = cancelled_items(plan, LOG.read_text())
    out = Path("bench/plans/s34_h200.json")
    out.write_text(json.dumps({**plan, "variants": items}, indent=1) + "\n")
    print(f"{out}: {len(items)} of {len(plan['variants'])} items")
