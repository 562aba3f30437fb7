#!/usr/bin/env bash
# Device call A of session 35 (carry .whl2, .cutexz and .tables from bench/pack_tables.sh on the H200 table of record
# s33 and the H100 table h100-s30), on whichever card comes, since a call that names no H200 need may get an H100:
# - H200: bench/session_s34a.sh (session 34 got no machine): plan s34_h200.json resumed from s33, then the new table's
#   wheel self-tested at every M;
# - H100: bench/session_s29d.sh on table h100-s30: its winners checked at the M of their bucket that no run measured.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
case "$HW" in
  h200) exec bash "$(dirname "$0")/session_s34a.sh" ;;
  h100) exec bash "$(dirname "$0")/session_s29d.sh" ;;
  *) echo "session 35 call A: no plan for this card: $HW"; exit 0 ;;
esac
