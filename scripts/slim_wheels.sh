#!/usr/bin/env bash
# Shrink the wheels a device call carries (.whl, from ../shared/gpu/fetch-wheels.sh): pulp 3.3.2's
# wheel bundles CBC for six platforms (16.4 MB of the 64 MiB a call may carry); the GPU machine
# is linux x86-64, so the other five are dropped and the wheel is repacked with `wheel`, which
# writes its RECORD afresh. Run once after fetching; a wheel already slim is left as it is.
# Usage (from the project root): bash scripts/slim_wheels.sh
set -euo pipefail
py=${PYTHON:-.venv/bin/python}
for whl in .whl/pulp-*.whl; do
  [ -f "$whl" ] || continue
  # grep reads the whole listing: `grep -q` quits at its match, unzip then dies of SIGPIPE, and
  # under pipefail a fat wheel looked slim (a flaky CI run, session 47)
  if ! unzip -Z1 "$whl" | grep "solverdir/cbc/win/" >/dev/null; then
    echo "$whl: already slim"; continue
  fi
  tmp=$(mktemp -d)
  "$py" -m wheel unpack -d "$tmp" "$whl" >/dev/null
  dir=$(echo "$tmp"/pulp-*)
  rm -rf "$dir"/pulp/solverdir/cbc/{win,osx,linux/arm64,linux/i32}
  before=$(stat -c %s "$whl")
  mkdir -p "$tmp/out"
  "$py" -m wheel pack -d "$tmp/out" "$dir" >/dev/null
  mv "$tmp"/out/*.whl "$whl"
  rm -rf "$tmp"
  echo "$whl: $before -> $(stat -c %s "$whl") bytes (CBC for linux x86-64 only)"
done
