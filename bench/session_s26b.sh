#!/usr/bin/env bash
# Device call B of session 26 (carry .whl2 and .cutexz), on an H200 only, from call A's table (decode-tuning-s26, in
# bench/results/ as carried with the repo): the table's export self-tested on the slots call A tuned, the attention
# input block (its mla_norms_gemm path now has H200 winners) and the decode layer (the shared expert's new kernel and
# o_proj's GEMV with the norm now have H200 runs).
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" != h200 ]; then echo "session 26 call B: a $HW; it runs the H200 table only, nothing to do"; exit 0; fi
source "$(dirname "$0")/device_lib.sh"
export KT_LOG_FORMAT=plain
W=$(ls -t bench/results/*-h200-decode-tuning-s26.json 2>/dev/null | head -n1)
[ -n "$W" ] || { echo "== no table of call A" >> "$L"; cat "$L"; exit 3; }
echo "== table $W" >> "$L"
use_plan bench/plans/s26_h200.json  # only for KT_SELFTEST_PATH (CuTe DSL on the self-test's path)
# the export of the table as it stands: a plan of no runs, resumed from call A's DB
python3 -c "import json; json.dump({'deployment': json.load(open('$PLAN'))['deployment'], 'variants': []}, open('/tmp/no_runs.json', 'w'))"
run timeout 120 python3 bench/service_tuning.py --plan /tmp/no_runs.json --hardware h200 --what export-s26b \
    --workers 1 --export --budget-s 30 --resume-db "${W%.json}.sqlite" --data-dir /tmp/kt-service-s26b --out /tmp/s26b-export
KT_WHEEL_DIR=/tmp/s26b-export KT_SELFTEST_S=${KT_SELFTEST_S:-80} KT_SELFTEST_ARGS=${KT_SELFTEST_ARGS:-"--slot shared_expert \
--slot dense_gemm --slot oproj_residual_norm --slot mla_norms_gemm --rounds 10"} selftest_exported
run timeout "${KT_ATTN_TIMEOUT_S:-110}" python3 bench/attn_block.py --batches 1,4,16 --winners "$W" --out "$OUT"
run timeout "${KT_LAYER_TIMEOUT_S:-220}" python3 bench/decode_layer.py --batches 1,2,4,16 --winners "$W" --out "$OUT"
grep -E "^== |M= *[0-9]|passed|rror" "$L" | tail -30
