#!/usr/bin/env bash
# Device session ZN (carry .whl2 and .cutexz; install line as in h200_session_v.sh): the CuTe tensor-core GEMV
# (kernels/variants/cute/dense_gemm_mma_gemv.py) in its second form, through the service, with session ZL's K-split
# runs where the card has not run them (bench/plans/make_mma_gemv_zn.py says what each plan holds and what session
# ZM taught), resumed from the table of the card in hand, so it extends that card's winners and nothing is keyed to
# the wrong hardware:
# - an H200: table ZJ (the table of record) with zn_all.json (108 runs);
# - an H100: the H100 table of session ZM with mma_gemv_zn.json (90 runs);
# then the attention input block with the new winners and the dense slots' self-test of the new export (ZJ's
# swap-AB entries were never self-tested on the H200), then Nsight Compute's counters (bench/ncu_dense.py) of the
# tensor-core GEMV, the K-split GEMV and cuBLAS at the same shapes, within KT_NCU_S seconds.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
# KT_PLAN, KT_WHAT, KT_RESUME_DB, KT_ATTN_BATCHES (empty: no attention block) and KT_NCU_ITEMS make it another
# session's (bench/session_zo.sh).
case "$HW" in
  h200) export KT_PLAN=${KT_PLAN:-bench/plans/zn_all.json} KT_WHAT=${KT_WHAT:-decode-tuning-zn} \
          KT_RESUME_DB=${KT_RESUME_DB:-bench/results/2026-12-05-h200-decode-tuning-zj.sqlite} KT_TUNING_S=${KT_TUNING_S:-300} ;;
  h100) export KT_PLAN=${KT_PLAN:-bench/plans/mma_gemv_zn.json} KT_WHAT=${KT_WHAT:-decode-tuning-h100-zn} \
          KT_RESUME_DB=${KT_RESUME_DB:-bench/results/2026-12-06-h100-decode-tuning-h100-zm.sqlite} KT_TUNING_S=${KT_TUNING_S:-240} ;;
  *) echo "no table to resume on this card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"; exit 3 ;;
esac
export KT_MOE_BATCHES=none KT_REQUIRE_HW=$HW KT_ATTN_BATCHES=${KT_ATTN_BATCHES-1,4,16} \
  KT_SELFTEST_S=${KT_SELFTEST_S:-60} KT_SELFTEST_ARGS=${KT_SELFTEST_ARGS:-"--slot dense_gemm --rounds 10"}
bash "$(dirname "$0")/h200_session_x.sh"
rc=$?
T=kernels/variants/cute/dense_gemm_mma_gemv.py
K=kernels/variants/cute/dense_gemm_ksplit_gemv.py
# one ncu_dense.py --item a line
KT_NCU_ITEMS=${KT_NCU_ITEMS:-"fused_qkv_a:16:$T:{\"WROWS\": 8, \"RT\": 1, \"KWARPS\": 16, \"UNROLL\": 14}
fused_qkv_a:16:$T:{\"WROWS\": 8, \"RT\": 1, \"KWARPS\": 14, \"UNROLL\": 8, \"FENCE\": 1}
fused_qkv_a:16:stock
fused_qkv_a:1:$T:{\"WROWS\": 8, \"RT\": 1, \"KWARPS\": 16, \"UNROLL\": 14}
fused_qkv_a:1:$K:{\"ROWS\": 1, \"KWARPS\": 14, \"UNROLL\": 2}
q_b_proj:16:$T:{\"WROWS\": 8, \"RT\": 1, \"KWARPS\": 16, \"UNROLL\": 3}
q_b_proj:16:stock
o_proj:16:$T:{\"WROWS\": 8, \"RT\": 1, \"KWARPS\": 8, \"UNROLL\": 4}
o_proj:16:stock"}
if command -v ncu > /dev/null && [ "${KT_NCU_S:-80}" != 0 ]; then
  ITEMS=()
  while IFS= read -r it; do [ -n "$it" ] && ITEMS+=(--item "$it"); done <<< "$KT_NCU_ITEMS"
  echo "== $(date +%T) bench/ncu_dense.py" >> "$OUT/run.log"
  timeout "${KT_NCU_S:-80}" python3 bench/ncu_dense.py --out "$OUT" --budget-s "$(( ${KT_NCU_S:-80} - 20 ))" \
    "${ITEMS[@]}" >> "$OUT/run.log" 2>&1
  echo "== exit $? $(date +%T)" >> "$OUT/run.log"
fi
exit $rc
