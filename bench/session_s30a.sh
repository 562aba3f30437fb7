#!/usr/bin/env bash
# Device call A of session 30 (carry .whl2, .cutexz and .tables from bench/pack_tables.sh with the H200 table of record
# s25 and the H100's h100-s29-checks): whichever card comes does its card's next step.
# - H200: bench/session_s29c.sh: plan s29_h200.json (the buckets the table of record has no verdict for, then session
#   27's backlog) resumed from s25, then the new table's wheel self-tested at every M its buckets serve;
# - H100: bench/session_s29d.sh resumed from h100-s29-checks: the service's bucket checks of the H100 table, the 337
#   runs session 29's call had no time for (its cancelled runs are planned again), for KT_CHECKS_S (420 s here).
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
case "$HW" in
  h200) exec bash "$(dirname "$0")/session_s29c.sh" ;;
  h100) KT_CHECKS_S=${KT_CHECKS_S:-420} exec bash "$(dirname "$0")/session_s29d.sh" ;;
  *) echo "session 30 call A: no plan for this card: $HW" ;;
esac
