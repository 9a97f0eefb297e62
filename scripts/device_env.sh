# Source on the GPU machine (carry .whl): installs the carried wheels and evt, sets the cache.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/tmp/evt-install.log 2>&1 \
  || echo "pip install -e . failed (/tmp/evt-install.log): backend='evt' is unknown by name"
export EVT_CACHE_DIR=${EVT_CACHE_DIR:-/tmp/evt-cache}
