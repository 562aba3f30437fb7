#!/usr/bin/env bash
# Device session B on the lent H200 (issue: win back the decode path): the Triton variants of every
# single-GPU slot tuned through the embedded service itself (API + GPU worker, SQLite + filesystem
# broker), results written from its winners table; then the MoE block of one layer, stock vs tuned.
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KT_DATA_DIR=/tmp/kt KT_LOG_FORMAT=plain
L=$OUT/run.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$L"
run() { echo "== $*" >> "$L"; "$@" >> "$L" 2>&1; echo "== exit $?" >> "$L"; }
run timeout "${KT_TUNING_S:-380}" python3 bench/service_tuning.py --plan bench/plans/h200_decode.json --hardware h200 --budget-s "$(( ${KT_TUNING_S:-380} - 40 ))" --out "$OUT"
tail -30 /tmp/kt-service/logs/worker0.log >> "$L" 2>/dev/null
run timeout 100 python3 bench/moe_block.py --batches 1,4,16,64
grep -E "^== |wrote|job |geomean|rror" "$L" | tail -20
