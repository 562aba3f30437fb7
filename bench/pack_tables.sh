#!/usr/bin/env bash
# Tables for a device call, small enough to travel beside the wheels: each named table's JSON as is and its SQLite DB
# xz-compressed (a 6 MB DB packs to ~0.6 MB) into .tables/, an ignored folder the call names in carry. On the device,
# bench/unpack_tables.sh puts them back into bench/results/ before a session script looks for them there.
# Usage: bench/pack_tables.sh bench/results/TABLE.json...
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qx "/.tables/" .git/info/exclude 2>/dev/null || echo "/.tables/" >> .git/info/exclude
rm -rf .tables && mkdir .tables
for w in "$@"; do
  [ -e "$w" ] && [ -e "${w%.json}.sqlite" ] || { echo "no table $w (JSON and SQLite)" >&2; exit 2; }
  cp "$w" .tables/
  xz -T0 -9 -c "${w%.json}.sqlite" > ".tables/$(basename "${w%.json}").sqlite.xz"
done
du -sh .tables
