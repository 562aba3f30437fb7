#!/usr/bin/env bash
# Device call B of session 26 (carry .whl2 and .cutexz), from the latest table of the card that comes, as carried in
# bench/results/ with the repo:
# - H200: the latest call A's table (decode-tuning-s29, -s28, -s27 or -s26, whichever is here): its export self-tested on the slots call A tuned, the attention input
#   block (its mla_norms_gemm path now has H200 winners) and the decode layer (the shared expert's new kernel and
#   o_proj's GEMV with the norm now have H200 runs);
# - H100: the latest of tables h100-s30, -s29, -s28, -s27, -s26, -s25 that is here: its export self-tested on moe_experts_shared and
#   shared_expert (session 25's self-test ran out of its time inside the first moe_experts_shared entry), then the
#   decode layer at M = 1, 2.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
source "$(dirname "$0")/device_lib.sh"  # first_of, and the log under $OUT
if [ "$HW" = h200 ]; then
  # sessions 27-29's calls (bench/session_s27a.sh, session_s28b.sh, session_s29a.sh) write decode-tuning-s27 / -s28 / -s29: their tables
  # extend s26's plan; the latest session's that is here (not ls -t: a checkout's mtimes are when it was copied)
  W=$(first_of bench/results/*-h200-decode-tuning-s34.json bench/results/*-h200-decode-tuning-s33.json bench/results/*-h200-decode-tuning-s29.json bench/results/*-h200-decode-tuning-s28.json bench/results/*-h200-decode-tuning-s27.json \
      bench/results/*-h200-decode-tuning-s26.json)
  SELFTEST="--slot shared_expert --slot dense_gemm --slot oproj_residual_norm --slot mla_norms_gemm"
  ST_S=80 ATTN=1,4,16 LAYER=1,2,4,16
elif [ "$HW" = h100 ]; then
  W=$(first_of bench/results/*-h100-decode-tuning-h100-s30.json bench/results/*-h100-decode-tuning-h100-s29.json bench/results/*-h100-decode-tuning-h100-s28.json bench/results/*-h100-decode-tuning-h100-s27.json \
      bench/results/*-h100-decode-tuning-h100-s26.json bench/results/*-h100-decode-tuning-h100-s25.json)
  SELFTEST="--slot moe_experts_shared --slot shared_expert"
  ST_S=200 ATTN= LAYER=1,2
else
  echo "session 26 call B: no plan for this card: $HW"; exit 0
fi
export KT_LOG_FORMAT=plain
carried_table "$W"
export_table "$W" export-s26b /tmp/s26b-export
KT_WHEEL_DIR=/tmp/s26b-export KT_SELFTEST_S=${KT_SELFTEST_S:-$ST_S} KT_SELFTEST_ARGS=${KT_SELFTEST_ARGS:-"$SELFTEST --rounds 10"} \
  selftest_exported
[ -z "$ATTN" ] || run timeout "${KT_ATTN_TIMEOUT_S:-110}" python3 bench/attn_block.py --batches "$ATTN" --winners "$W" --out "$OUT"
run timeout "${KT_LAYER_TIMEOUT_S:-220}" python3 bench/decode_layer.py --batches "$LAYER" --winners "$W" --out "$OUT"
grep -E "^== |M= *[0-9]|passed|rror" "$L" | tail -30
