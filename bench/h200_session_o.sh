#!/usr/bin/env bash
# Device session O on the lent H200 (carry .whl2), the last minutes of the 2026-12-03 evening budget:
# 1. bench/moe_block.py with session N's winners (the searched MoE and router configs at M=1);
# 2. the service's transfer search on dense_gemm_splitk for fused_qkv_a at M=4 and 16 (16 evaluations each),
#    resumed from session N's DB.
# On 2026-12-03 these ran as two device calls with the same commands (moe_block first, while the machine
# was warm, then the search); this script is those commands.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site2 .whl2/*.whl && export PYTHONPATH=/tmp/site2:$PYTHONPATH
source "$(dirname "$0")/device_lib.sh"
export KT_LOG_FORMAT=plain KT_RUN_TIMEOUT_S=${KT_RUN_TIMEOUT_S:-120}
N=${KT_WINNERS:-$(ls -t bench/results/*-h200-decode-tuning-search.json | head -n1)}
run timeout 150 python3 bench/moe_block.py --batches 1,4,16,64 --winners "$N"
run timeout 190 python3 bench/service_tuning.py --plan bench/plans/h200_search_o.json --hardware h200 \
    --what decode-tuning-search-o --workers 6 --budget-s 150 --resume-db "${N%.json}.sqlite" \
    --data-dir /tmp/kt-service-o --out "$OUT"
rm -f "$OUT"/*.md
grep -E "^== |M= *[0-9]|search |rror" "$L" | tail
