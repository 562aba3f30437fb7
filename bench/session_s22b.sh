#!/usr/bin/env bash
# Device call B of session 22 (carry .whl2 and .cutexz): on an H200 only, from call A's table (decode-tuning-s22a:
# table ZN plus the mla_norms_gemm slot and the ring GEMV): the export of that table and its self-test for the two
# slots the table changed, the attention input block, and the decode layer. Takes the table from /tmp/kt-s22 when
# it lands on call A's warm machine, else from bench/results/ (carried with the repo).
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" != h200 ]; then echo "session 22 call B: a $HW; it runs the H200 table only, nothing to do"; exit 0; fi
source "$(dirname "$0")/device_lib.sh"
export KT_LOG_FORMAT=plain
W=$(ls -t /tmp/kt-s22/*-decode-tuning-s22a.json bench/results/*-h200-decode-tuning-s22a.json 2>/dev/null | head -n1)
[ -n "$W" ] || { echo "== no table of call A" >> "$L"; cat "$L"; exit 3; }
DB=${W%.json}.sqlite
echo "== table $W" >> "$L"
use_plan bench/plans/s22_h200.json  # only for KT_SELFTEST_PATH (CuTe DSL on the self-test's path)
# the export of the table as it stands: a plan of no runs, resumed from call A's DB
python3 -c "import json; json.dump({'deployment': json.load(open('$PLAN'))['deployment'], 'variants': []}, open('/tmp/no_runs.json', 'w'))"
run timeout 120 python3 bench/service_tuning.py --plan /tmp/no_runs.json --hardware h200 --what export-s22b \
    --workers 1 --export --budget-s 30 --resume-db "$DB" --data-dir /tmp/kt-service-s22b --out /tmp/s22b-export
KT_WHEEL_DIR=/tmp/s22b-export KT_SELFTEST_S=${KT_SELFTEST_S:-70} \
  KT_SELFTEST_ARGS=${KT_SELFTEST_ARGS:-"--slot dense_gemm --slot mla_norms_gemm --rounds 10"} selftest_exported
run timeout "${KT_ATTN_TIMEOUT_S:-130}" python3 bench/attn_block.py --batches 1,4,16 --winners "$W" --out "$OUT"
run timeout "${KT_LAYER_TIMEOUT_S:-230}" python3 bench/decode_layer.py --batches 1,4,16,64 --winners "$W" --out "$OUT"
grep -E "^== |M= *[0-9]|passed|rror" "$L" | tail -30
