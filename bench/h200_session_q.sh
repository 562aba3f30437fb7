#!/usr/bin/env bash
# Device session Q on the lent H200 (carry .whl2 and .cutexz; install line as in h200_session_k.sh).
# Session P's DB resumed: the service's transfer search on the (slot, shape, M) targets that the
# earlier sessions barely explored although they are where the missed targets are -- the Triton GEMV
# on fused_qkv_a (2 configs at M=1 so far; its one-round-trip configs, 1,056-2,112 CTAs of one K
# range each, are the shape of the best plain read in the latency-floor file), o_proj and q_b_proj at
# M=4/16 (stock wins those buckets today), the CuTe GEMV on fused_qkv_a and o_proj at M=1 (2 of 64
# configs each so far), and a second MoE M=1 search (50% of the floor where a read reaches 99%).
source "$(dirname "$0")/device_lib.sh"
export KT_LOG_FORMAT=plain KT_RUN_TIMEOUT_S=${KT_RUN_TIMEOUT_S:-120}
use_plan "bench/plans/h200_search_q.json"
DB=${KT_RESUME_DB:-$(ls -t bench/results/*-h200-decode-tuning-splitk-reduce.sqlite | head -n1)}
S=${KT_TUNING_S:-500}
run timeout "$S" python3 bench/service_tuning.py --plan "$PLAN" --hardware h200 --what decode-tuning-search-q \
    --workers "${KT_WORKERS:-12}" --budget-s "$(( S - 45 ))" --resume-db "$DB" --data-dir /tmp/kt-service-q --out "$OUT"
rm -f "$OUT"/*.md
grep -E "^== |search |job |geomean|rror" "$L" | tail -30
