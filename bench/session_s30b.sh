#!/usr/bin/env bash
# Device call B of session 30 (carry .whl2, .cutexz and .tables from bench/pack_tables.sh with table h100-s29-checks,
# and s25 for an H200), on whichever card comes:
# - H100: plan s30_h100.json (rmsnorm_gemm at M = 64, the bucket make_s29 could not fill) resumed from h100-s29-checks
#   through the service, then the service's bucket checks of whatever it crowns (33-63), for KT_CHECKS_S (120 s); the
#   table it writes is decode-tuning-h100-s30;
# - H200: bench/session_s29c.sh (s29_h200.json times that bucket there already).
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
case "$HW" in
  h200) exec bash "$(dirname "$0")/session_s29c.sh" ;;
  h100) ;;
  *) echo "session 30 call B: no plan for this card: $HW"; exit 0 ;;
esac
source "$(dirname "$0")/device_lib.sh"
export KT_LOG_FORMAT=plain KT_RUN_TIMEOUT_S=${KT_RUN_TIMEOUT_S:-120}
S=${KT_CHECKS_S:-120}
run timeout $(( S + 240 )) python3 bench/service_tuning.py --plan bench/plans/s30_h100.json --hardware h100 \
    --what decode-tuning-h100-s30 --workers "${KT_WORKERS:-12}" --export --budget-s 150 --bucket-checks-s "$S" \
    --resume-db bench/results/2026-12-07-h100-decode-tuning-h100-s29-checks.sqlite --data-dir /tmp/kt-service-s30b \
    --out "$OUT"
rm -f "$OUT"/*.md "$OUT"/*.whl
grep -E "^== |job |bucket checks|exported|rror" "$L" | tail -16
