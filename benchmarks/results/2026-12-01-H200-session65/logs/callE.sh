. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p $OUT/logs; cp devcalls/callE.sh $OUT/logs/
timeout 60 python3 benchmarks/config_sweep.py --patterns bias_relu --configs 128x256x64_c1x1_cooperative --shapes 4096x8192x2048 --tile-orders 0:0,0:1 --rounds 3 --json $OUT/sweep_E.json > $OUT/logs/sweep_E.txt 2>&1; echo "sweep rc=$?"; tail -3 $OUT/logs/sweep_E.txt | cut -c1-160
timeout 60 python3 benchmarks/epilogue_arithmetic.py --rounds 3 --shapes 4096x8192x2048 --only relu --json $OUT/arith_E.json > $OUT/logs/arith_E.txt 2>&1; echo "arith rc=$?"; tail -1 $OUT/logs/arith_E.txt | cut -c1-300
