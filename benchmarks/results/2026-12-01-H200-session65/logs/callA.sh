. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1; export EVT_COMPILE_JOBS=16
mkdir -p $OUT/logs; cp devcalls/callA.sh $OUT/logs/
date +%T; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv,noheader
# 1. the main loop against cuBLAS at large K: bias+ReLU and the bare GEMM, 8 configs, 2 tile orders
timeout 200 python3 benchmarks/config_sweep.py --patterns bias_relu --bare --shapes 8192x4096x4096,4096x8192x2048,8192x11008x4096 --configs 128x256x64_c1x1_cooperative,128x256x64_c2x1_cooperative,128x256x64_c1x2_cooperative,256x128x64_c1x1_cooperative,256x128x64_c1x2_cooperative,256x128x64_c2x1_cooperative,128x128x64_c1x1_pingpong,128x128x64_c1x2_pingpong --tile-orders 0:0,1:0 --json $OUT/sweep_large_k.json > $OUT/logs/sweep_A.txt 2>&1; echo "sweep rc=$?"; tail -5 $OUT/logs/sweep_A.txt | cut -c1-300
date +%T
# 2. the check's misses, in turn (7 rounds): every epilogue at the two K >= 2048 shapes
timeout 330 python3 benchmarks/epilogue_arithmetic.py --rounds 7 --shapes 8192x4096x4096,4096x8192x2048 --json $OUT/epilogue_arithmetic_A1.json > $OUT/logs/arith_A1.txt 2>&1; echo "arith rc=$?"; tail -2 $OUT/logs/arith_A1.txt | cut -c1-300
timeout 60 python3 benchmarks/epilogue_arithmetic.py --rounds 7 --shapes 8192x4096x256 --only 'poly*' --json $OUT/epilogue_arithmetic_A2.json > $OUT/logs/arith_A2.txt 2>&1; echo "arith2 rc=$?"; tail -1 $OUT/logs/arith_A2.txt | cut -c1-300
date +%T; nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3; echo "c7510/lmem check done"
python3 scripts/kernel_pack.py pack --new --out $OUT/kernels-A.tar.xz 2>&1 | tail -1
date +%T
