#!/usr/bin/env bash
# Device session P on the lent H200 (carry .whl2; install line as in h200_session_o.sh). NOT RUN YET.
# The split-K GEMM's one-launch reduction (REDUCE="last_cta": the split that arrives last at a tile sums the
# partials) against the two-launch one ("kernel"), config for config, in the same service session, on
# fused_qkv_a, q_b_proj and o_proj at M=1, 4, 16 (bench/plans/h200_splitk_reduce_p.json; its 63 kernels
# compile for sm_90a with no spills: bench/results/2026-12-03-sm90a-compiler-report-plan-h200_splitk_reduce_p.md),
# then a transfer search on fused_qkv_a at M=4/16 over the space that now holds REDUCE. Resumed from
# session O's DB, so the winners table stays the one table.
source "$(dirname "$0")/device_lib.sh"
export KT_LOG_FORMAT=plain KT_RUN_TIMEOUT_S=${KT_RUN_TIMEOUT_S:-120}
DB=${KT_RESUME_DB:-$(ls -t bench/results/*-h200-decode-tuning-search-o.sqlite | head -n1)}
S=${KT_TUNING_S:-360}
run timeout "$S" python3 bench/service_tuning.py --plan bench/plans/h200_splitk_reduce_p.json --hardware h200 \
    --what decode-tuning-splitk-reduce --workers "${KT_WORKERS:-6}" --budget-s "$(( S - 45 ))" --resume-db "$DB" \
    --data-dir /tmp/kt-service-p --out "$OUT"
rm -f "$OUT"/*.md
grep -E "^== |search |job |geomean|rror" "$L" | tail -20
