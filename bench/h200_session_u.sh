#!/usr/bin/env bash
# Device session U on the lent H200 (carry .whl2; install line as in h200_session_o.sh). NOT RUN YET.
# moe_experts_grouped's ALIGN="none" (no align launch at M <= 8: one group per (token, expert) pair) against
# the sorted form, config for config at M=1 and 4 from the M=1 winner, then a transfer search at M=1. The
# edited file is a new variant whose parent is the measured one (bench/service_tuning.py sets provenance
# .parent_id), so the search seeds from the parent's 48 M=1 evaluations instead of starting cold.
# Then the Triton GEMV on fused_qkv_a (the reachable missed target: 1.25x of 1.5x, bound 1.61x) with its new
# split counts: SPLIT_K 14 x BLOCK_N 16 is 1,848 CTAs of one 16 KB round trip, the fastest plain read's shape;
# configs at M=1/4 beside the current M=1 winner, then a transfer search (parent-seeded, as the MoE's).
# Resumed from session R's DB: the winners table stays the one table.
source "$(dirname "$0")/device_lib.sh"
export KT_LOG_FORMAT=plain KT_RUN_TIMEOUT_S=${KT_RUN_TIMEOUT_S:-120}
DB=${KT_RESUME_DB:-$(ls -t bench/results/*-h200-decode-tuning-r.sqlite | head -n1)}
S=${KT_TUNING_S:-330}
run timeout "$S" python3 bench/service_tuning.py --plan bench/plans/h200_moe_noalign_u.json --hardware h200 \
    --what decode-tuning-u --workers "${KT_WORKERS:-12}" --budget-s "$(( S - 45 ))" --resume-db "$DB" \
    --data-dir /tmp/kt-service-u --out "$OUT"
rm -f "$OUT"/*.md
grep -E "^== |search |job |geomean|rror" "$L" | tail -20
