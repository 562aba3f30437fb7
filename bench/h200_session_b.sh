#!/usr/bin/env bash
# Device session B on the lent H200 (issue: win back the decode path): the Triton variants of every
# single-GPU slot tuned through the embedded service itself (API + GPU workers, SQLite + filesystem
# broker), results written from its winners table; the winners exported as the vLLM wheel, installed
# apart from kerneltune and self-tested on the same GPU; then the MoE block of one layer.
source "$(dirname "$0")/device_lib.sh"
export KT_LOG_FORMAT=plain
S=${KT_TUNING_S:-280}
T='[{"BLOCK_M":16,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3},{"BLOCK_M":32,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3},{"BLOCK_M":64,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3},{"BLOCK_M":16,"BLOCK_N":32,"BLOCK_K":256,"SPLIT_K":1,"num_warps":4,"num_stages":3},{"BLOCK_M":32,"BLOCK_N":32,"BLOCK_K":256,"SPLIT_K":1,"num_warps":4,"num_stages":3},{"BLOCK_M":64,"BLOCK_N":32,"BLOCK_K":256,"SPLIT_K":1,"num_warps":4,"num_stages":3}]'
# at most 8 files come back: the .md tables are rebuilt here from the JSON, so they go at once
# the Triton dense_gemm variant through the worker's evaluation at every batch size (session A's step)
ONLY_TUNING=${KT_ONLY_TUNING:-0}  # 1: the service tuning, export and self-test alone
[ "$ONLY_TUNING" = 1 ] || pr 100 8 --what dense-gemm-triton --variants kernels/variants/triton/dense_gemm_splitk.py --configs "$T"
run timeout "$S" python3 bench/service_tuning.py --plan bench/plans/h200_decode.json --hardware h200 \
    --workers "${KT_WORKERS:-6}" --export --budget-s "$(( S - 50 ))" --out "$OUT"
rm -f "$OUT"/*.md
tail -20 /tmp/kt-service/logs/worker0.log >> "$L" 2>/dev/null
selftest_exported
# the Triton search landscape (session A's step): every point of a subspace on q_b_proj at M = 1, 16
LS='{"BLOCK_M":[16],"BLOCK_N":[16,32,64,128],"BLOCK_K":[64,128,256,512],"SPLIT_K":[1,2,4,8],"num_warps":[4],"num_stages":[3],"constraints":["BLOCK_M >= M","BLOCK_M < 2 * M or BLOCK_M == 16","BLOCK_K * SPLIT_K <= K","BLOCK_N <= N","BLOCK_N * BLOCK_K <= 32768","num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K * 2 <= 196608"]}'
[ "$ONLY_TUNING" = 1 ] || pr 90 8 --what triton-landscape --variants kernels/variants/triton/dense_gemm_splitk.py --space "$LS" --configs all --shapes q_b_proj --batches 1,16 --landscape --min-time 0.1
rm -f "$OUT"/*-triton-landscape.json  # the same rows as the landscape file
[ "$ONLY_TUNING" = 1 ] || run timeout 60 python3 bench/moe_block.py --batches 1,4,16,64
grep -E "^== |wrote|job |geomean|export|rror" "$L" | tail -24
