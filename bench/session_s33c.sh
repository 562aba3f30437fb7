#!/usr/bin/env bash
# Device call C of session 33 (warm H200, after bench/session_s33b.sh): the service's bucket checks of the recovered
# table (POST /v1/winners/bucket-checks through bench/service_tuning.py --bucket-checks-s, 200 s), written as
# decode-tuning-s33-checks. Run in that call as bench/_s33c.sh (its run.log names it), KT_COMMIT=f9cbbef; kept here as
# the record of what ran. The cut step's API and workers were still running on the port then (fixed since: the
# stack now refuses a port another server holds, and service_tuning.py stops its stack on SIGTERM); this call's client
# talked to them, so its JSON (winners, checks: 12 of 25 jobs passed, the rest cancelled at the deadline) is that
# service's, and the DB copy it wrote (its own, unused) held none of the checks' runs: it is not kept.
source bench/device_lib.sh
export KT_LOG_FORMAT=plain
echo "== bucket checks of the recovered s33 table (its DB: /tmp/s29full/table.sqlite)" >> "$L"
run timeout 290 python3 bench/service_tuning.py --plan /tmp/no_runs.json --hardware h200 --what decode-tuning-s33-checks --workers 12 --export --budget-s 30 --bucket-checks-s 200 --resume-db /tmp/s29full/table.sqlite --data-dir /tmp/kt-service-s33c --out "$OUT"
rm -f "$OUT"/*.md "$OUT"/*.whl
grep -E "^== |bucket checks|exported|rror" "$L" | tail -12
