#!/usr/bin/env bash
# session 48 call B: the bf16 GELU's tail A/B in one process (config_sweep --functor: evt's own,
# i.e. P by Horner's rule; P by Estrin's scheme; the fp16 t form, two SFU instructions as the
# bf16 one was; the tanh GELU as the cheap bound), at 128x128 ping-pong, GPT-2's and BERT's FFN
# shapes, swept twice; then part 2's last case (dgrad_gelu/bert under Inductor's CUTLASS backend,
# never run: session 47's crash charging). Carry .whl, .kpack, out/bench-full, devcalls.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/b
for i in 1 2; do
  timeout 150 python3 benchmarks/config_sweep.py --patterns bias_gelu,bias_gelu_aux \
    --shapes 8192x3072x768,8192x4096x1024 --configs 128x128x64_c1x1_pingpong \
    --functor ";gelu_for_bf16=evt::GeluForBf16Estrin;gelu_for_bf16=evt::GeluForF16;gelu_for_bf16=evt::GeluTanh" \
    --json /tmp/b/sweep$i.json > /tmp/b/sweep$i.txt 2>&1
  echo "sweep $i rc=$? at $SECONDS s"; grep -v "Warning\|^W11" /tmp/b/sweep$i.txt | tail -n 24
done
EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha) EVT_BENCH_CALL_S=$(( 580 - SECONDS )) bash scripts/bench_full.sh 2 \
  --only 'dgrad_gelu/bert' --retry > /tmp/b/part2.txt 2>&1
echo "part 2 rc=$? at $SECONDS s"; grep -v "Warning\|^W11" /tmp/b/part2.txt | tail -n 20
tar -czf $OUT/callB.tar.gz -C /tmp b
