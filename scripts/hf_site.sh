#!/usr/bin/env bash
# Build .whl_models/hfsite.tar.xz: Hugging Face `transformers` and its dependencies for the GPU
# machine (python 3.12, no network there), pruned to the models tests/test_gpu_hf_models.py
# trains. The wheels themselves (about 25 MiB) would not fit the carried tree's 64 MiB with .whl
# and .kpack; the pruned folder is 6.6 MiB. On the device:
#   tar -xJf .whl_models/hfsite.tar.xz -C /tmp && export PYTHONPATH=$PYTHONPATH:/tmp/hfsite
# (carry .whl_models; numpy, typing_extensions, packaging, filelock and fsspec come with torch).
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-5.24.0}
models="gpt2 bert llama qwen3 gemma mixtral t5 vit gemma2 bloom deberta_v2 swin falcon auto"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
platform=(--python-version 3.12 --only-binary=:all: --platform manylinux_2_28_x86_64
          --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64)
python -m pip download -q -d "$tmp/w" "${platform[@]}" "transformers==$version"
# what torch's environment has, and what `import transformers` and the models never import
rm -f "$tmp"/w/{numpy,pydantic,pydantic_core,annotated_types,typing_inspection,rich,pygments}-* \
      "$tmp"/w/{markdown_it_py,mdurl,hf_xet,typing_extensions,packaging,filelock,fsspec}-*
python -m pip install -q --no-deps --no-compile --target "$tmp/hfsite" "${platform[@]}" "$tmp"/w/*.whl
for d in "$tmp"/hfsite/transformers/models/*/; do
  case " $models " in *" $(basename "$d") "*) ;; *) rm -rf "$d" ;; esac
done
rm -rf "$tmp"/hfsite/bin "$tmp"/hfsite/*.dist-info/RECORD
mkdir -p .whl_models
tar -cJf .whl_models/hfsite.tar.xz -C "$tmp" hfsite
echo ".whl_models/hfsite.tar.xz: $(du -h .whl_models/hfsite.tar.xz | cut -f1)"
