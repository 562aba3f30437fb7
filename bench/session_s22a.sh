#!/usr/bin/env bash
# Device call A of session 22 (carry .whl2 and .cutexz). On an H200: the two plans no H200 has run, in one
# service run resumed from table ZN (the table of record), so the new table holds both: the mla_norms_gemm slot
# (bench/plans/mla_norms_s21.json plus the 64-row tiles of mla_norms_m64_s21c.json at M = 64) and the ring GEMV
# (the H100 best 4 ring configs per bucket, bench/plans/make_s22_h200.py says why not all of ZU's plan). The attention block,
# self-test and decode layer run in call B (bench/session_s22b.sh) from this call's table, to keep each call under
# the 600 s a command may take. Both plans ran on the H100 (tables ZX-ZZ, s21b/s21c): there, the call re-times the
# H100 table's runners-up of the three projections at M = 1, 4, 16 (bench/plans/rerank_h100_s22.json, from
# bench/plans/make_rerank.py), each beside the winner it trails (the worker's incumbent control), resumed from table
# s21c, so its near-ties (1-3% apart, measured in different sessions) are decided head to head (done: table
# 2026-12-06-h100-decode-tuning-h100-rerank-s22a; KT_RERANK=1 runs it again, else an H100 does nothing).
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" = h100 ] && [ "${KT_RERANK:-0}" = 1 ]; then
  export KT_PLAN=bench/plans/rerank_h100_s22.json KT_WHAT=decode-tuning-h100-rerank-s22a KT_TUNING_S=${KT_TUNING_S:-240} \
    KT_RESUME_DB=bench/results/2026-12-06-h100-decode-tuning-h100-mla-m64-s21c.sqlite KT_MOE_BATCHES=none \
    KT_REQUIRE_HW=h100 KT_ATTN_BATCHES= KT_SELFTEST_S=0
  exec bash "$(dirname "$0")/h200_session_x.sh"
fi
if [ "$HW" != h200 ]; then echo "session 22 call A: nothing to do on this card: $HW"; exit 0; fi
export KT_PLAN=bench/plans/s22_h200.json KT_WHAT=decode-tuning-s22a KT_TUNING_S=${KT_TUNING_S:-480} \
  KT_RESUME_DB=bench/results/2026-12-06-h200-decode-tuning-zn.sqlite KT_MOE_BATCHES=none KT_REQUIRE_HW=h200 \
  KT_ATTN_BATCHES= KT_SELFTEST_S=0
bash "$(dirname "$0")/h200_session_x.sh"
rc=$?
# a warm machine keeps /tmp: call B can take the table from here when it lands on the same machine
mkdir -p /tmp/kt-s22 && cp "$OUT"/*-decode-tuning-s22a.* /tmp/kt-s22/ 2>/dev/null
exit $rc
