. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1; export EVT_COMPILE_JOBS=16
mkdir -p $OUT/logs; cp devcalls/callB.sh $OUT/logs/
date +%T; nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
# 1. the launch plan's raster order on real kernels (NaN-poisoned outputs against the reference)
timeout 150 python3 -m pytest -q -m gpu tests/test_gpu_configs.py -k "raster or wide_grid or wide_ping" -p no:cacheprovider > $OUT/logs/gpu_tests_B.txt 2>&1; echo "gpu tests rc=$?"; tail -3 $OUT/logs/gpu_tests_B.txt
date +%T
# 2. evt's order now (0:0) against CUTLASS's raster with the compiled swizzle (0:1, evt's order before), in turn
timeout 330 python3 benchmarks/config_sweep.py --patterns bias_relu --bare --rounds 5 --shapes 4096x8192x2048,8192x5632x2048,4096x5632x2048,6144x8192x2048,8192x11008x4096,8192x4096x4096 --configs 128x256x64_c1x1_cooperative,128x256x64_c2x1_cooperative,128x256x64_c1x2_cooperative,256x128x64_c1x1_cooperative,256x128x64_c1x2_cooperative,256x128x64_c2x1_cooperative --tile-orders 0:0,0:1 --json $OUT/sweep_raster.json > $OUT/logs/sweep_B.txt 2>&1; echo "sweep rc=$?"; tail -2 $OUT/logs/sweep_B.txt | cut -c1-200
date +%T
# 3. the benchmark's 4096 x 8192 x 2048 cases, now launched along M
timeout 80 python3 benchmarks/epilogue_arithmetic.py --rounds 5 --shapes 4096x8192x2048 --only relu,gelu,tanh,poly8 --json $OUT/epilogue_arithmetic_B.json > $OUT/logs/arith_B.txt 2>&1; echo "arith rc=$?"
date +%T; nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3; echo "c7510/lmem check done"
python3 scripts/kernel_pack.py pack --new --out $OUT/kernels-B.tar.xz 2>&1 | tail -1
date +%T
