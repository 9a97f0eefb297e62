. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1; export EVT_COMPILE_JOBS=16
mkdir -p $OUT/logs; cp devcalls/callD.sh $OUT/logs/
date +%T
timeout 230 python3 -m pytest -v -m gpu -p no:cacheprovider --tb=short -rf tests/test_gpu_node_coverage.py > $OUT/logs/gpu_tests_D1.txt 2>&1; echo "node coverage rc=$?"; grep -E "passed|failed" $OUT/logs/gpu_tests_D1.txt | tail -2
date +%T
timeout 230 python3 -m pytest -v -m gpu -p no:cacheprovider --tb=short -rf tests/test_gpu_models.py -k "not test_training_step_matches_fp32" > $OUT/logs/gpu_tests_D2.txt 2>&1; echo "models rc=$?"; grep -E "passed|failed" $OUT/logs/gpu_tests_D2.txt | tail -2
date +%T
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3; echo "c7510/lmem check done"
python3 scripts/kernel_pack.py pack --new --out $OUT/kernels-D.tar.xz 2>&1 | tail -1
