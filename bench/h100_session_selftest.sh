#!/usr/bin/env bash
# The H100 port's exported wheel (carried in .exported/) self-tested on a lent H100 for the slots its first
# session's 150 s did not reach (bench/results/2026-12-05-h100-selftest-port-zj.txt stops in moe_experts).
source "$(dirname "$0")/device_lib.sh"
KT_WHEEL_DIR=.exported KT_SELFTEST_S=${KT_SELFTEST_S:-240} \
  KT_SELFTEST_ARGS=${KT_SELFTEST_ARGS-"--slot moe_experts --slot oproj_residual_norm --slot rmsnorm_gemm --slot router --slot shared_expert --rounds 10"} \
  selftest_exported
cat "$L"
