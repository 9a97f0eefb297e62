. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1; export EVT_COMPILE_JOBS=16
mkdir -p $OUT/logs; cp devcalls/callC.sh $OUT/logs/
date +%T; nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
# 1. GPU tests: the MLP's and the models' training steps on real kernels (the check on, as by default)
timeout 330 python3 -m pytest -v -m gpu -p no:cacheprovider --tb=short -rf tests/test_gpu_mlp.py tests/test_gpu_models.py > $OUT/logs/gpu_tests_C.txt 2>&1; echo "gpu tests rc=$?"; grep -E "passed|failed|FAILED|ERROR" $OUT/logs/gpu_tests_C.txt | tail -8
date +%T
# 2. the raster order at K <= 1024 (not in the rule): evt's 0:0 against the other raster, in turn
timeout 120 python3 benchmarks/config_sweep.py --patterns bias_relu --bare --rounds 5 --shapes 4096x8192x1024,4096x8192x768,6144x8192x1024 --configs 128x256x64_c1x1_cooperative,128x256x64_c2x1_cooperative,256x128x64_c1x1_cooperative --tile-orders 0:0,1:0,0:1,1:1 --json $OUT/sweep_raster_small_k.json > $OUT/logs/sweep_C.txt 2>&1; echo "sweep rc=$?"
date +%T; nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3; echo "c7510/lmem check done"
python3 scripts/kernel_pack.py pack --new --out $OUT/kernels-C.tar.xz 2>&1 | tail -1
date +%T
