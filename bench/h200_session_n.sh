#!/usr/bin/env bash
# Device session N on the lent H200 (carry .whl2 and .cutexz; install line as in h200_session_k.sh):
# the service's own search on the two slots furthest from what one kernel of their size can reach at M=1
# (bench/results/*-h200-latency-floor.md: moe_experts 47% of the floor where a plain read reaches 99%,
# router 11% where it reaches 40%). The service starts from session K's DB (--resume-db), so its
# transfer search seeds from K's winners at the other Ms of the same variant, K's runs and winners stay
# in the one table, and the export + self-test cover every slot.
source "$(dirname "$0")/device_lib.sh"
export KT_LOG_FORMAT=plain KT_RUN_TIMEOUT_S=${KT_RUN_TIMEOUT_S:-120}
use_plan "bench/plans/h200_search_n.json"
DB=${KT_RESUME_DB:-$(ls -t bench/results/*-h200-decode-tuning-all.sqlite | head -n1)}
S=${KT_TUNING_S:-300}
run timeout "$S" python3 bench/service_tuning.py --plan "$PLAN" --hardware h200 --what decode-tuning-search \
    --workers "${KT_WORKERS:-6}" --export --budget-s "$(( S - 45 ))" --resume-db "$DB" --data-dir /tmp/kt-service-n --out "$OUT"
rm -f "$OUT"/*.md
selftest_exported
grep -E "^== |wrote|search |job |geomean|export|rror" "$L" | tail -30
