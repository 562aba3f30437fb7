#!/usr/bin/env bash
# Device session R on the lent H200 (carry .whl2 and .cutexz; install line as in h200_session_k.sh).
# The new slot rmsnorm_gemm (q_a_layernorm folded into q_b_proj, one launch) through the service,
# resumed from session Q's DB so the winners table stays the one table: the torch variant (the norm
# as forward_native or as F.rms_norm, then cuBLAS: the stronger unfused baseline beside the slot's
# stock), eight configs of the fused Triton kernel (pre-flight: no spills,
# bench/results/2026-12-03-sm90a-compiler-report-plan-h200_rmsnorm_gemm_r.md) and a transfer
# search; then the export of the whole table and its self-test apart from kerneltune.
source "$(dirname "$0")/device_lib.sh"
export KT_LOG_FORMAT=plain KT_RUN_TIMEOUT_S=${KT_RUN_TIMEOUT_S:-120}
use_plan "bench/plans/h200_rmsnorm_gemm_r.json"
DB=${KT_RESUME_DB:-$(ls -t bench/results/*-h200-decode-tuning-search-q.sqlite | head -n1)}
S=${KT_TUNING_S:-270}
run timeout "$S" python3 bench/service_tuning.py --plan "$PLAN" --hardware h200 --what decode-tuning-r \
    --workers "${KT_WORKERS:-12}" --export --budget-s "$(( S - 45 ))" --resume-db "$DB" --data-dir /tmp/kt-service-r --out "$OUT"
rm -f "$OUT"/*.md
KT_SELFTEST_S=${KT_SELFTEST_S:-200} selftest_exported
grep -E "^== |search |job |geomean|export|rror" "$L" | tail -30
