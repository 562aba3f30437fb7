#!/usr/bin/env bash
# The device side of bench/pack_tables.sh: the carried .tables/ back into bench/results/ (JSON copied, DB decompressed).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/results
for f in .tables/*; do
  [ -e "$f" ] || continue
  case "$f" in
    *.xz) xz -dc "$f" > "bench/results/$(basename "${f%.xz}")" ;;
    *) cp "$f" bench/results/ ;;
  esac
done
ls bench/results
