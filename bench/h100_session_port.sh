#!/usr/bin/env bash
# Device session on a lent H100 (carry .whl2 and .cutexz; install line as in h200_session_v.sh): the H200 table
# of record (ZJ) re-measured on the H100 through the service, each winner against the H100's stock kernel in
# the same process, in a fresh service DB keyed by the H100's fingerprint (plan: bench/plans/from_winners.py
# over ZJ's results, with session ZK's CuTe warp GEMV configs for o_proj at M = 4, 16, 64, the buckets cuBLAS
# holds on the H200, as ZK's plan held them at 86f655e; it now holds M = 4 only); then the MoE block and the
# attention input block with the H100 table's winners, and the self-test of its export. No number of it is an
# H200 number.
export KT_PLAN=bench/plans/h100_port_zj.json KT_WHAT=decode-port-zj KT_RESUME_DB=none \
  KT_TUNING_S=${KT_TUNING_S:-260} KT_MOE_BATCHES=${KT_MOE_BATCHES:-1,4,16,64} KT_MOE_TIMEOUT_S=${KT_MOE_TIMEOUT_S:-90} \
  KT_ATTN_BATCHES=${KT_ATTN_BATCHES:-1,4,16} KT_SELFTEST_S=${KT_SELFTEST_S:-150} KT_REQUIRE_HW=${KT_REQUIRE_HW:-h100}
exec bash "$(dirname "$0")/h200_session_x.sh"
