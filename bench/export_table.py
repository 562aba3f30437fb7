"""Export a results table's winners as the vLLM wheel, here, and record what the export said.

A table's DB (bench/service_tuning.py's .sqlite beside its .json) is copied (the export is recorded in the DB) and
exported with export.export_package: the CuTe entries compiled ahead of time for the evidence's arch on this machine
(no GPU needed), the M each entry's runs measured slower than stock given to stock. Writes the wheel and
``<date>-<hardware>-export-<what>.json`` (date, machine, commit, command, the export's result) into --out.

    python bench/export_table.py bench/results/2026-12-07-h100-decode-tuning-h100-s30.json --what s31
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from db.session import make_engine, make_session_factory  # noqa: E402
from export import export_package  # noqa: E402
from search.landscape import git_commit  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table", help="a bench/service_tuning.py results JSON; its DB is the .sqlite beside it")
    ap.add_argument("--what", required=True, help="names the record: <date>-<hardware>-export-<what>.json")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--wheel-dir", default=None, help="where the wheel goes (default: a folder that is removed)")
    ap.add_argument("--no-aot", action="store_true")
    args = ap.parse_args()
    doc = json.loads(Path(args.table).read_text())
    hardware, model = doc["fingerprint"]["hardware_class"], doc["plan"]["deployment"]["spec"]
    with tempfile.TemporaryDirectory(prefix="kt-export-table-") as tmp_s:
        db = Path(tmp_s) / "table.sqlite"
        shutil.copyfile(Path(args.table).with_suffix(".sqlite"), db)
        wheels = Path(args.wheel_dir) if args.wheel_dir else Path(tmp_s) / "wheels"
        t = time.perf_counter()
        with make_session_factory(make_engine(f"sqlite:///{db}"))() as s:
            res = export_package(s, hardware=hardware, model=model, out_dir=wheels, allow_partial=True,
                                 aot=not args.no_aot)
        seconds = time.perf_counter() - t
    record = {"what": f"export-{args.what}", "date": dt.date.today().isoformat(), "commit": git_commit(ROOT),
              "command": "python bench/export_table.py " + " ".join(sys.argv[1:]),
              "machine": {"host": platform.machine(), "python": platform.python_version(), "gpu": None},
              "table": Path(args.table).name, "export_s": round(seconds, 1),
              "result": res.model_dump(exclude={"wheel_path", "export_id"})}
    out = Path(args.out) / f"{record['date']}-{hardware}-export-{args.what}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"{out}: {res.wheel_filename} sha256 {res.sha256[:16]}, {res.entries} entries, "
          f"{res.aot.builds} ahead-of-time builds ({res.aot.chained} chained), {len(res.slower)} entries with M given "
          f"to stock, {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
