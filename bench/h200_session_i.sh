#!/usr/bin/env bash
# Device session I on the lent H200 (service wheels .whl2): the MoE experts job again through the
# embedded service, after session H's runs all hit their 90 s limit hashing the 4.2 GB weight set on
# the host (~14 hashes a run; workers/check.py now digests large inputs on the device). Four
# workers: each MoE child holds more than one weight set (check trials, bench sets).
source "$(dirname "$0")/device_lib.sh"
export KT_LOG_FORMAT=plain KT_RUN_TIMEOUT_S=${KT_RUN_TIMEOUT_S:-120}
S=${KT_TUNING_S:-220}
run timeout "$S" python3 bench/service_tuning.py --plan bench/plans/h200_moe.json --hardware h200 \
    --workers "${KT_WORKERS:-4}" --budget-s "$(( S - 30 ))" --out "$OUT"
rm -f "$OUT"/*.md
grep -E "^== |wrote|job |geomean|rror" "$L" | tail -16
