#!/usr/bin/env bash
# Its H100 branch ran once (74cac7a); its H200 branch never ran and is superseded by bench/session_zn.sh, whose H200
# plan runs this kernel's three best H100 configs per bucket beside the tensor-core GEMV.
# Device session ZL (carry .whl2 and .cutexz; install line as in h200_session_v.sh): the CuTe K-split GEMV
# through the service (bench/plans/make_ksplit_gemv_zl.py says why and what each plan holds), resumed from the
# table of the card in hand, so it extends that card's winners and nothing is keyed to the wrong hardware:
# - an H200: table ZJ (the table of record) with ksplit_gemv_zl_all.json (102 runs), then the attention input
#   block and the self-test of every entry of the new export (ZJ's swap-AB entries were never self-tested on it);
# - an H100: the H100's ZL table (h100-zl, where the 72 runs of ksplit_gemv_zl.json ran) with the 30 runs of
#   ksplit_gemv_zl2.json, then the attention block and the dense slots' self-test.
# Then, on either card, Nsight Compute's counters (bench/ncu_dense.py) of the K-split winners the H100 found, the
# Triton GEMV that holds fused_qkv_a 3-4 on the H200, and cuBLAS at the same shapes: what limits each.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
case "$HW" in
  h200) export KT_PLAN=bench/plans/ksplit_gemv_zl_all.json KT_WHAT=decode-tuning-zl \
          KT_RESUME_DB=bench/results/2026-12-05-h200-decode-tuning-zj.sqlite \
          KT_SELFTEST_S=${KT_SELFTEST_S:-200} KT_SELFTEST_ARGS=${KT_SELFTEST_ARGS:-} ;;
  h100) export KT_PLAN=bench/plans/ksplit_gemv_zl2.json KT_WHAT=decode-tuning-h100-zl2 \
          KT_RESUME_DB=bench/results/2026-12-05-h100-decode-tuning-h100-zl.sqlite \
          KT_SELFTEST_S=${KT_SELFTEST_S:-120} KT_SELFTEST_ARGS=${KT_SELFTEST_ARGS:-"--slot dense_gemm --rounds 10"} ;;
  *) echo "no table to resume on this card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"; exit 3 ;;
esac
export KT_MOE_BATCHES=none KT_REQUIRE_HW=$HW KT_TUNING_S=${KT_TUNING_S:-250} KT_ATTN_BATCHES=${KT_ATTN_BATCHES:-1,4,16}
bash "$(dirname "$0")/h200_session_x.sh"
rc=$?
if command -v ncu > /dev/null; then
  K=kernels/variants/cute/dense_gemm_ksplit_gemv.py
  G=kernels/variants/triton/dense_gemm_gemv.py
  echo "== $(date +%T) bench/ncu_dense.py" >> "$OUT/run.log"
  timeout "${KT_NCU_S:-150}" python3 bench/ncu_dense.py --out "$OUT" \
    --item "fused_qkv_a:1:$K:{\"ROWS\": 1, \"KWARPS\": 14, \"UNROLL\": 2}" --item fused_qkv_a:1:stock \
    --item "fused_qkv_a:4:$K:{\"ROWS\": 4, \"KWARPS\": 4, \"UNROLL\": 4}" --item fused_qkv_a:4:stock \
    --item "fused_qkv_a:4:$G:{\"BLOCK_M\": 4, \"BLOCK_N\": 4, \"BLOCK_K\": 512, \"SPLIT_K\": 1, \"num_warps\": 4, \"num_stages\": 4}" \
    --item "q_b_proj:1:$K:{\"ROWS\": 2, \"KWARPS\": 6, \"UNROLL\": 1}" --item q_b_proj:1:stock \
    --item "o_proj:4:$K:{\"ROWS\": 8, \"KWARPS\": 2, \"UNROLL\": 2}" --item o_proj:4:stock >> "$OUT/run.log" 2>&1
  echo "== exit $? $(date +%T)" >> "$OUT/run.log"
fi
exit $rc
