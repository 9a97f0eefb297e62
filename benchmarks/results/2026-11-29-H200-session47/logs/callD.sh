#!/usr/bin/env bash
# session 47 call D: Inductor's pad_mm on ViT's scores, in fresh processes (torch 2.11 here)
# (devcalls/pad_probe.py is callD_pad_probe.py here)
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
for m in plain fresh plain after_evt; do timeout 60 python3 devcalls/pad_probe.py $m 2>&1 | grep -v "Warning\|^W1129" | tail -n 6; echo "$m done at $SECONDS s"; done
timeout 90 python3 -m evt.bench --only attention_scores/vit --baselines compile --out /tmp/vc 2>&1 | grep "attention_scores/vit " | tail -n 2
