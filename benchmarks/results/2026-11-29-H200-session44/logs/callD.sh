. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1; timeout 370 python3 scripts/model_fuzz.py --device cuda --count 12 --seed 60000 > $OUT/fuzz.txt 2>&1
