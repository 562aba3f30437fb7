#!/usr/bin/env bash
# Device session F on the lent H200: session E again after its findings (router claims per epilogue,
# the MoE stock timed eagerly, stacks in timeout verdicts), then the Triton dense_gemm landscape on
# q_b_proj at M = 1. Needs the service wheels (.whl2). At most 8 files come back from $OUT.
source "$(dirname "$0")/device_lib.sh"
export KT_LOG_FORMAT=plain
S=${KT_TUNING_S:-330}
export KT_RUN_TIMEOUT_S=${KT_RUN_TIMEOUT_S:-90}  # a hung run holds the device: give up on it sooner
run timeout "$S" python3 bench/service_tuning.py --plan bench/plans/h200_decode.json --hardware h200 \
    --workers "${KT_WORKERS:-8}" --export --budget-s "$(( S - 45 ))" --out "$OUT"
rm -f "$OUT"/*.md
selftest_exported
LS='{"BLOCK_M":[16],"BLOCK_N":[16,32,64,128],"BLOCK_K":[64,128,256,512],"SPLIT_K":[1,2,4,8],"num_warps":[4],"num_stages":[3],"constraints":["BLOCK_M >= M","BLOCK_M < 2 * M or BLOCK_M == 16","BLOCK_K * SPLIT_K <= K","BLOCK_N <= N","BLOCK_N * BLOCK_K <= 32768","num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K * 2 <= 196608"]}'
pr "${KT_LAND_S:-150}" 12 --what triton-landscape --variants kernels/variants/triton/dense_gemm_splitk.py --space "$LS" \
    --configs all --shapes q_b_proj --batches 1 --landscape --min-time 0.1
rm -f "$OUT"/*-triton-landscape.json  # the landscape file holds the same rows
grep -E "^== |wrote|job |geomean|export|rror" "$L" | tail -24
