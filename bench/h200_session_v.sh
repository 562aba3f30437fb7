#!/usr/bin/env bash
# Device session V on the lent H200: sessions U and T in one call (carry .whl2 and .cutexz; the export's
# self-test needs CuTe DSL, two of the table's winners are CuTe kernels). Install line:
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site2 .whl2/*.whl && \
#   mkdir -p /tmp/site && tar -xJf .cutexz/cute_site.tar.xz -C /tmp/site && \
#   export PYTHONPATH=/tmp/site2:/tmp/site/nvidia_cutlass_dsl/python_packages:/tmp/site
# 1. Session U's plan resumed from R's DB (ALIGN none vs sort on the MoE, the one-round-trip GEMV configs on
#    fused_qkv_a, each then a parent-seeded transfer search), and the export of the whole table;
# 2. the MoE block and the attention input block with THIS table's winners (the file step 1 wrote), so the
#    block figures use the final configs of every kernel in them;
# 3. the exported wheel's self-test apart from kerneltune (last: the blocks matter more if time runs out).
source "$(dirname "$0")/device_lib.sh"
export KT_LOG_FORMAT=plain KT_RUN_TIMEOUT_S=${KT_RUN_TIMEOUT_S:-120}
use_plan bench/plans/h200_moe_noalign_u.json
DB=${KT_RESUME_DB:-$(ls -t bench/results/*-h200-decode-tuning-r.sqlite | head -n1)}
S=${KT_TUNING_S:-290}
run timeout "$S" python3 bench/service_tuning.py --plan "$PLAN" --hardware h200 --what decode-tuning-u \
    --workers "${KT_WORKERS:-12}" --export --budget-s "$(( S - 45 ))" --resume-db "$DB" \
    --data-dir /tmp/kt-service-u --out "$OUT"
rm -f "$OUT"/*.md
W=$(ls -t "$OUT"/*-decode-tuning-u.json | head -n1)
run timeout 100 python3 bench/moe_block.py --batches 1,4,16,64 --winners "$W" --out "$OUT"
run timeout 70 python3 bench/attn_block.py --winners "$W" --batches 1,4,16 --out "$OUT"
KT_SELFTEST_S=${KT_SELFTEST_S:-100} selftest_exported
grep -E "^== |search |job |geomean|export|M= *[0-9]|rror" "$L" | tail -40
