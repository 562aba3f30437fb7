#!/usr/bin/env bash
# Device session F on the lent H200: session E again after its findings (router claims per epilogue,
# the MoE stock timed eagerly, stacks in timeout verdicts), then the Triton dense_gemm landscape on
# q_b_proj at M = 1. Needs the service wheels (.whl2). At most 8 files come back from $OUT.
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KT_DATA_DIR=/tmp/kt KT_LOG_FORMAT=plain
L=$OUT/run.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$L"
run() { echo "== $(date +%T) $*" >> "$L"; "$@" >> "$L" 2>&1; echo "== exit $? $(date +%T)" >> "$L"; }
S=${KT_TUNING_S:-330}
export KT_RUN_TIMEOUT_S=${KT_RUN_TIMEOUT_S:-90}  # a hung run holds the device: give up on it sooner
run timeout "$S" python3 bench/service_tuning.py --plan bench/plans/h200_decode.json --hardware h200 \
    --workers "${KT_WORKERS:-8}" --export --budget-s "$(( S - 45 ))" --out "$OUT"
rm -f "$OUT"/*.md
for whl in "$OUT"/*.whl; do
  [ -e "$whl" ] || continue
  pkg=$(basename "$whl" | cut -d- -f1)
  run python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/exported "$whl"
  (cd /tmp && PYTHONPATH=/tmp/exported timeout 90 python3 -m "$pkg.selftest") > "$OUT/selftest.txt" 2>&1
  echo "== selftest exit $?" >> "$L"
done
LS='{"BLOCK_M":[16],"BLOCK_N":[16,32,64,128],"BLOCK_K":[64,128,256,512],"SPLIT_K":[1,2,4,8],"num_warps":[4],"num_stages":[3],"constraints":["BLOCK_M >= M","BLOCK_M < 2 * M or BLOCK_M == 16","BLOCK_K * SPLIT_K <= K","BLOCK_N <= N","BLOCK_N * BLOCK_K <= 32768","num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K * 2 <= 196608"]}'
run timeout "${KT_LAND_S:-150}" python3 bench/pipeline_runs.py --parallel 12 --timeout 90 --out "$OUT" --what triton-landscape \
    --variants kernels/variants/triton/dense_gemm_splitk.py --space "$LS" --configs all --shapes q_b_proj --batches 1 --landscape --min-time 0.1
rm -f "$OUT"/*.md "$OUT"/*-triton-landscape.json  # the landscape file holds the same rows
grep -E "^== |wrote|job |geomean|export|rror" "$L" | tail -24
