"""Reading bench/service_tuning.py results files: which shipped file each variant id of a winners table is.

A session started with --resume-db carries the earlier sessions' variants (and their winners) in its DB,
but its results file lists only its own jobs. The earlier file sits next to the DB it resumed from (same
stem), so the map is followed back along the --resume-db chain written in each file's command.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]


def resumed_from(doc: dict[str, Any]) -> Path | None:
    """The results file of the DB this session resumed, when it is in the repo."""
    argv = shlex.split(doc.get("command", ""))
    if "--resume-db" not in argv[:-1]:
        return None
    db = Path(argv[argv.index("--resume-db") + 1])
    path = (db if db.is_absolute() else REPO / db).with_suffix(".json")
    return path if path.is_file() else None


def variant_files(doc: dict[str, Any]) -> dict[int, str]:
    """variant id -> shipped file path: the file's own map of every variant in its DB (written since
    2026-12-03 night), else its jobs and those of every session it resumed from."""
    if doc.get("variant_files"):
        return {int(k): v for k, v in doc["variant_files"].items()}
    files: dict[int, str] = {}
    seen: set[Path] = set()
    while doc is not None:
        for job in doc.get("jobs", []):
            files.setdefault(int(job["variant_id"]), job["file"])  # the latest session's word wins
        prev = resumed_from(doc)
        if prev is None or prev in seen:
            break
        seen.add(prev)
        doc = json.loads(prev.read_text())
    return files


def tuned_winners(path: str | Path, wanted: Callable[[str], bool]) -> dict[str, dict[int, tuple[str, dict[str, Any]]]]:
    """{"slot/shape": {M: (file stem, config)}} of the buckets a results file's table gives to a tuned
    variant, for the slot/shape keys ``wanted`` accepts (stock-kept buckets are left out). A winner that no file
    along the --resume-db chain names is an error: a caller must not take it for its own kernel, nor
    silently run its default config in its place."""
    doc = json.loads(Path(path).read_text())
    files = {vid: Path(f).stem for vid, f in variant_files(doc).items()}
    out: dict[str, dict[int, tuple[str, dict[str, Any]]]] = {}
    for key in filter(wanted, doc["summary"]):
        for bucket in doc["summary"][key]["buckets"].values():
            if bucket["winner"] == "stock":
                continue
            vid = int(bucket["winner"].split()[1])
            if vid not in files:
                raise SystemExit(f"{path}: {key} bucket {bucket['m']} was won by variant {vid}, which no results "
                                 "file along its --resume-db chain names")
            out.setdefault(key, {})[int(bucket["m"])] = (files[vid], bucket["config"])
    return out
