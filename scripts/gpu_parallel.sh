#!/usr/bin/env bash
# Run GPU test selections side by side on the device (kernel builds dominate a fresh machine's
# GPU tests; most test files build their kernels one at a time, so parallel selections build in
# parallel; the kernel cache's lock keeps two processes from building the same kernel twice).
# A selection that prefetches through evt's build pool (test_gpu_fuzz.py builds the seeds it
# selected, the model tests all their regions) already starts one nvcc per core, each pool sized
# to the whole machine: run at most one of those at a time (session 16: four fuzz shards beside a model
# test built one kernel in 480 s, likely some 60 compilers of ~3.5 GB each on 16 cores and
# 128 GB; the same fuzz file alone next to three one-at-a-time selections passed in 340 s).
# `test_gpu_mlp.py::test_new_batch_size_reuses_binaries` counts the shared cache's entries
# before and after its steps: beside a selection that builds, it fails (session 30); run it alone.
#   scripts/gpu_parallel.sh SECONDS "name: pytest args" ...   (args as a shell line: -k 'a or b')
# Each selection runs under `timeout SECONDS` with its log in $OUT/logs/<name>.log (or ./logs);
# prints each one's exit status and summary line.  Source scripts/device_env.sh first.
set -u
limit=$1; shift
logs=${OUT:-.}/logs; mkdir -p "$logs"
flags="-v -m gpu -p no:cacheprovider -p no:logging --show-capture=no --tb=short -rf"
pids=()
for sel in "$@"; do
  name=${sel%%:*}; args=${sel#*:}
  (eval "timeout $limit python3 -m pytest $flags $args" >"$logs/$name.log" 2>&1; echo "rc=$?" >>"$logs/$name.log") &
  pids+=($!)
done
wait "${pids[@]}"
for sel in "$@"; do
  name=${sel%%:*}
  echo "== $name ($(tail -1 "$logs/$name.log")): $(grep -E '^=+ .* in [0-9.]+s' "$logs/$name.log" | tail -1)"
  grep -E "^(FAILED|ERROR)" "$logs/$name.log" | head -5
done
