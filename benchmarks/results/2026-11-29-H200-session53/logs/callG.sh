#!/usr/bin/env bash
# session 53 call G: the model fuzzer on real kernels (bf16, smooth activations, against fp32
# eager) for three seeds whose transposed block draws BatchNorm1d: 3 and 9 on the [B, D, S]
# permute, 24 on the flattened rows. Kernels built here, carried in .kpack.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/d
for s in 3 9 24; do
  timeout 80 python3 scripts/model_fuzz.py --device cuda --seed $s --count 1 >> /tmp/d/model_fuzz.txt 2>&1
  echo "seed $s rc=$? at $SECONDS s"
done
grep -vE "^W1|HiGHS|third-party" /tmp/d/model_fuzz.txt | tail -n 12
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-G.tar.xz > /tmp/d/pack.txt 2>&1; cat /tmp/d/pack.txt
tar -czf $OUT/callG.tar.gz -C /tmp d
