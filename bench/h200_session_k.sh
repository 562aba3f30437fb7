#!/usr/bin/env bash
# Device session K on the lent H200 (carry .whl2 and .cutexz; install line as in h200_session_h.sh):
# every single-GPU slot tuned through ONE embedded service, so one winners table (one SQLite file,
# copied beside the results) holds them all: bench/plans/h200_decode_all.json (the configs that won a
# bucket in sessions F, H and I, plus the landscape's best split-K point and the GEMV's new unrolled configs; the CuTe GEMV at M=1 only; 94 runs). Six workers: a
# MoE child holds ~15 GB of weight sets, and the device lock serialises the timed phases anyway.
# Jobs run in plan order: the small slots and MoE first (so the table holds every slot even if the budget
# ends early), then the dense GEMM variants. The MoE job has a torch gather + bmm variant beside the Triton
# one (M=1, 16): a graph-capturable torch baseline on the leaderboard, since vLLM's fused_moe is not on
# the device. Then the winners are exported and the wheel self-tested.
source "$(dirname "$0")/device_lib.sh"
export KT_LOG_FORMAT=plain KT_RUN_TIMEOUT_S=${KT_RUN_TIMEOUT_S:-120}
use_plan "bench/plans/h200_decode_all.json"
S=${KT_TUNING_S:-500}
run timeout "$S" python3 bench/service_tuning.py --plan "$PLAN" --hardware h200 --what decode-tuning-all \
    --workers "${KT_WORKERS:-6}" --export --budget-s "$(( S - 45 ))" --out "$OUT"
rm -f "$OUT"/*.md
selftest_exported
grep -E "^== |wrote|job |geomean|export|rror" "$L" | tail -30
