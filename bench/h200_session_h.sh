#!/usr/bin/env bash
# Device session H on the lent H200 (next session, service wheels .whl2): the jobs session F's budget
# cut (MoE experts, the split-K dense_gemm) through the embedded service, the export of all winners
# so far in that DB, and the wheel's self-test on the GPU.
source "$(dirname "$0")/device_lib.sh"
export KT_LOG_FORMAT=plain KT_RUN_TIMEOUT_S=${KT_RUN_TIMEOUT_S:-90}
S=${KT_TUNING_S:-330}
run timeout "$S" python3 bench/service_tuning.py --plan "${KT_PLAN:-bench/plans/h200_decode_rest.json}" --hardware h200 \
    --workers "${KT_WORKERS:-8}" --export --budget-s "$(( S - 45 ))" --out "$OUT"
rm -f "$OUT"/*.md
selftest_exported
grep -E "^== |wrote|job |geomean|export|rror" "$L" | tail -24
