#!/usr/bin/env bash
# Device call B of session 33 (warm H200, right after bench/session_s29c.sh's tuning step was cut by its `timeout`):
# the cut step's service DB recovered and exported. The step (plan s29_h200.json resumed from the s25 table) had
# finished 36 of its 68 jobs and cancelled the rest at its deadline, but `timeout` ended it before it wrote its table.
# This copies that DB with its WAL (a plain copy of the main file alone misses the last writes), checkpoints it into
# one file, exports it through the service (a plan of no runs resumed from it: decode-tuning-s33), and self-tests the
# wheel at every M each entry's bucket serves. Run inline in that call (its run.log names it bench/_s33b.sh), with
# KT_COMMIT=f9cbbef; kept here as the record of what ran. It only works on the machine that ran the cut step.
# As it turned out, the cut step's API and workers were still up on the port (see bench/session_s33c.sh), so this
# export and the results JSON came from that API, whose DB is the one copied here: the JSON's 76 winners match the
# DB copy's row for row (same run ids). The wheel's every-M self-test does not depend on which API exported it.
D=/tmp/kt-service-decode-tuning-s29
mkdir -p /tmp/s29full && for x in "" -wal -shm; do cp "$D/kerneltune.db$x" "/tmp/s29full/table.sqlite$x"; done
python3 -c "
import sqlite3; c=sqlite3.connect('/tmp/s29full/table.sqlite'); print(c.execute('PRAGMA wal_checkpoint(TRUNCATE)').fetchall(), c.execute('PRAGMA journal_mode=DELETE').fetchall(), c.execute('select count(*) from jobs').fetchall()); c.close()"
python3 -c "import json; json.dump({'deployment': json.load(open('bench/plans/s29_h200.json'))['deployment'], 'variants': []}, open('/tmp/no_runs.json', 'w'))"
source "$(dirname "$0")/device_lib.sh"
echo "== recovered: the partial DB of session_s29c.sh's cut tuning step (WAL checkpointed), exported" >> "$L"
run timeout 200 python3 bench/service_tuning.py --plan /tmp/no_runs.json --hardware h200 --what decode-tuning-s33 --workers 1 --export --budget-s 30 --resume-db /tmp/s29full/table.sqlite --data-dir /tmp/kt-service-s33 --out "$OUT"
rm -f "$OUT"/*.md
use_plan bench/plans/s29_h200.json
selftest_every_m "$OUT" $(( 500 - SECONDS ))
grep -E "^== |rror" "$L" | tail -12
