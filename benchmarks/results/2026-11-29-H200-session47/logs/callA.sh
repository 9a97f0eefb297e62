#!/usr/bin/env bash
# session 47 call A: the staged stores' 16-byte copies (tests, sweep, ViT's scores), the batched GPU
# tests (the causal mask computed in training), the fuzzer on real kernels with a causal mask
# (devcalls/fuzz_kernels.py is callA_fuzz_kernels.py here)
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/a
# the fuzz seeds' kernels (not carried) built in the background while the tests and timings run
(EVT_SDPA=0 timeout 420 nice python3 devcalls/fuzz_kernels.py --build > /tmp/a/fuzz_build.txt 2>&1; echo "fuzz kernels built at $SECONDS s" >> /tmp/a/fuzz_build.txt) &
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
timeout 150 python3 -m pytest -q -m gpu tests/test_gpu_configs.py -k staged -p no:cacheprovider > /tmp/a/staged_tests.txt 2>&1
echo "staged tests rc=$? at $SECONDS s"; tail -n 8 /tmp/a/staged_tests.txt
timeout 150 python3 -m pytest -q -m gpu tests/test_gpu_batched.py -p no:cacheprovider > /tmp/a/batched_tests.txt 2>&1
echo "batched tests rc=$? at $SECONDS s"; tail -n 8 /tmp/a/batched_tests.txt
timeout 120 python3 benchmarks/config_sweep.py --patterns attention_scores --configs 128x256x64_c1x1_cooperative_e64,128x256x64_c1x1_cooperative_e64_ss,128x128x64_c1x1_pingpong,128x128x64_c1x1_pingpong_ss --json /tmp/a/sweep.json > /tmp/a/sweep.txt 2>&1
echo "sweep rc=$? at $SECONDS s"; grep -v Warning /tmp/a/sweep.txt | tail -n 30
TORCH_LOGS=output_code timeout 150 python3 scripts/step_variants.py --steps attention_scores/vit --variant "default:" --variant "staged: EVT_STAGED_STORES=1" > /tmp/a/variants.txt 2>&1
echo "variants rc=$? at $SECONDS s"; grep -v Warning /tmp/a/variants.txt | grep -v "^ \|^#\|^V1129\|^$" | tail -n 25
# torch.compile's ViT scores alone in a fresh process, as part 1 times it (0.186 ms there, 0.0985 in step_variants)
TORCH_LOGS=output_code timeout 90 python3 -m evt.bench --only attention_scores/vit --baselines mm,compile --out /tmp/a/vit_compile > /tmp/a/vit_compile.txt 2>&1
echo "vit compile rc=$? at $SECONDS s"; grep "attention_scores/vit " /tmp/a/vit_compile.txt | tail -n 4
export EVT_SDPA=0
wait; grep -v "^W1129" /tmp/a/fuzz_build.txt | tail -n 4
left=$(( 540 - SECONDS )); [ $left -gt 40 ] && timeout $left python3 scripts/model_fuzz.py --device cuda --mask causal --count 6 --seed 72000 > /tmp/a/fuzz1.txt 2>&1
echo "fuzz 1 rc=$? at $SECONDS s"; grep -v "^W1129\|Warning" /tmp/a/fuzz1.txt | tail -n 8
left=$(( 560 - SECONDS )); [ $left -gt 40 ] && timeout $left python3 scripts/model_fuzz.py --device cuda --mask causal --count 8 --seed 72200 > /tmp/a/fuzz2.txt 2>&1
echo "fuzz 2 rc=$? at $SECONDS s"; grep -v "^W1129\|Warning" /tmp/a/fuzz2.txt | tail -n 8
grep -h "C7510\|lmem\|local memory" $EVT_CACHE_DIR/*/build.log 2>/dev/null | head -5
python3 scripts/kernel_pack.py pack --new --out /tmp/a/built.tar.xz 2>&1 | tail -n 2
tar -czf $OUT/callA.tar.gz -C /tmp a
