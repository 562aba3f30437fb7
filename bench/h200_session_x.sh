#!/usr/bin/env bash
# Device session X on the lent H200 (carry .whl2 and .cutexz; install line as in h200_session_v.sh):
# 1. shared_expert_gemv through the service, resumed from session W's table (U's plan, re-run): configs at
#    M = 1, 2, 4 with and without PDL (w2 prefetched during gate/up), then a transfer search at M = 1, and the
#    export of the whole table;
# 2. the MoE block with THIS table's winners (the shared expert from whichever file won each bucket);
# 3. the exported wheel's self-test apart from kerneltune.
# KT_PLAN, KT_WHAT, KT_RESUME_DB and KT_MOE_BATCHES make it another session's (bench/h200_session_y.sh).
source "$(dirname "$0")/device_lib.sh"
export KT_LOG_FORMAT=plain KT_RUN_TIMEOUT_S=${KT_RUN_TIMEOUT_S:-120}
use_plan "${KT_PLAN:-bench/plans/h200_shared_expert_x.json}"
WHAT=${KT_WHAT:-decode-tuning-x}
DB=${KT_RESUME_DB:-bench/results/2026-12-04-h200-decode-tuning-u.sqlite}
S=${KT_TUNING_S:-240}
# the hardware class the worker serves, from the card in hand (calls that name no kind may get an H100)
HW=${KT_HARDWARE:-$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)}
HW=${HW:-h200}
# KT_REQUIRE_HW: a session that resumes one card's table stops at once on another card (its results would be
# keyed by that card and extend nothing)
if [ -n "${KT_REQUIRE_HW:-}" ] && [ "$HW" != "$KT_REQUIRE_HW" ]; then
  echo "== this card is $HW, the session needs $KT_REQUIRE_HW: stopped" >> "$L"; cat "$L"; exit 3
fi
RESUME=(--resume-db "$DB"); [ "$DB" = none ] && RESUME=()  # KT_RESUME_DB=none: a fresh service DB
# The plan's deadline leaves KT_TUNING_MARGIN_S for the runs in flight, the winners and the export, whose CuTe kernels
# are compiled ahead of time (38 builds in session 33's H200 table): 45 s was too little there and `timeout` cut the
# step before its table was written.
run timeout "$S" python3 bench/service_tuning.py --plan "$PLAN" --hardware "$HW" --what "$WHAT" \
    --workers "${KT_WORKERS:-12}" --export --budget-s "$(( S - ${KT_TUNING_MARGIN_S:-110} ))" "${RESUME[@]}" \
    --data-dir "/tmp/kt-service-$WHAT" --out "$OUT"
rm -f "$OUT"/*.md
W=$(ls -t "$OUT"/*-"$WHAT".json | head -n1)
# KT_MOE_BATCHES=none skips the MoE block (a plan that changes no slot of it); KT_SELFTEST_S=0 the self-test
if [ "${KT_MOE_BATCHES:-}" != none ]; then
  run timeout "${KT_MOE_TIMEOUT_S:-100}" python3 bench/moe_block.py --batches "${KT_MOE_BATCHES:-1,4,16,64}" --winners "$W" --out "$OUT"
fi
if [ -n "${KT_ATTN_BATCHES:-}" ]; then  # the attention input block with this table's winners
  run timeout "${KT_ATTN_TIMEOUT_S:-100}" python3 bench/attn_block.py --batches "$KT_ATTN_BATCHES" --winners "$W" --out "$OUT"
fi
KT_SELFTEST_S=${KT_SELFTEST_S:-100}
[ "$KT_SELFTEST_S" = 0 ] || selftest_exported
grep -E "^== |search |job |geomean|export|M= *[0-9]|rror" "$L" | tail -40
