# Source on the GPU machine (carry .whl, and .kpack if built): installs the carried wheels and
# evt, sets the cache and fills it with the carried kernels.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/tmp/evt-install.log 2>&1 \
  || echo "pip install -e . failed (/tmp/evt-install.log): backend='evt' is unknown by name"
export EVT_CACHE_DIR=${EVT_CACHE_DIR:-/tmp/evt-cache}
# kernels built on the CPU machine (scripts/kernel_pack.py), when the call carries .kpack
# or by an earlier call (its `kernel_pack.py pack --new --out $OUT/...` copied into .kpack/)
mkdir -p "$EVT_CACHE_DIR"
for pack in .kpack/*.tar.xz; do
  [ -f "$pack" ] && tar -xJf "$pack" -C "$EVT_CACHE_DIR" \
    && echo "kernel pack: $(tar -tJf "$pack" | grep -c kernel.so) kernels from $pack"
done
