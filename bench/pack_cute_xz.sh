#!/usr/bin/env bash
# CuTe DSL for a device call that also carries the service wheels: the wheel's files (unzipped, as
# pip --target lays them out: it has no scripts or .data) in an xz tarball, 39 MiB instead of 56.
# Takes ~6 min on two cores. Needs .whl from ../shared/device/fetch-cute-wheel.sh.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qx "/.cutexz/" .git/info/exclude 2>/dev/null || echo "/.cutexz/" >> .git/info/exclude
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && python3 -m zipfile -e "$OLDPWD"/.whl/nvidia_cutlass_dsl-*.whl .)
mkdir -p .cutexz
tar -C "$tmp" -cf - . | xz -T0 -9e > .cutexz/cute_site.tar.xz
du -sh .cutexz
