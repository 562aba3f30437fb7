#!/usr/bin/env bash
# Device session ZT (carry .whl2 and .cutexz; install line as in h200_session_v.sh), session ZN's script with other
# plans (bench/plans/make_ring_gemv_zp.py says what each holds), within the device time left to the session:
# - an H200: table ZN (the table of record) with zs_all.json (the ring GEMV: ROTATE 1 of the H100's three best
#   configs per bucket, then session ZP's 70), then the attention input block and the self-test of the new export;
# - an H100: its session ZS table with ring_rotate_zt.json (the rest of ZP's configs with ROTATE 1), then the
#   self-test.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
case "$HW" in
  h100) export KT_PLAN=bench/plans/ring_rotate_zt.json KT_WHAT=decode-tuning-h100-zt KT_TUNING_S=${KT_TUNING_S:-170} \
          KT_RESUME_DB=bench/results/2026-12-06-h100-decode-tuning-h100-zs.sqlite KT_ATTN_BATCHES= ;;
  h200) export KT_PLAN=bench/plans/zs_all.json KT_WHAT=decode-tuning-zt KT_TUNING_S=${KT_TUNING_S:-270} \
          KT_RESUME_DB=bench/results/2026-12-06-h200-decode-tuning-zn.sqlite KT_ATTN_BATCHES=${KT_ATTN_BATCHES-1,4,16} ;;
esac
export KT_NCU_S=0 KT_SELFTEST_S=${KT_SELFTEST_S:-45}
exec bash "$(dirname "$0")/session_zn.sh"
