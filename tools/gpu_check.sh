#!/usr/bin/env bash
# The GPU check: nbval on every chapter and solution notebook plus the GPU-only
# checks (tests/test_gpu.py), for a machine that has a CUDA build of torch but
# no Jupyter stack. The GPU job of .github/workflows/ci.yml runs it too.
#
#   bash tools/gpu_check.sh [WHEELS]
#
# WHEELS (optional): a folder of carried wheels; every wheel in it is installed,
# without any index and without resolving (--no-deps), into .gpu-site/, which
# comes first on the path, next to the packages the machine has (its CUDA torch).
# Prepare it on a machine with PyPI, for the GPU machine's Python:
#
#   bash tools/gpu_check.sh --download WHEELS [PYTHON_VERSION]   # e.g. 3.12
#
# which fetches requirements/gpu.txt and everything it needs at the lock's
# versions, then drops the wheels named in SKIP_WHEELS: a device call carries
# at most 64 MiB with the working tree (18 MiB), and the whole closure is
# about 75 wheels, 45 MiB. The default drops what the notebooks never import
# (debugpy and jedi: ipykernel and IPython load them only for a debugger and
# tab completion; widgetsnbextension: the widgets' JavaScript for a browser)
# and what the H200 image of the device machine already has (numpy, pillow,
# huggingface_hub, tokenizers and the rest of the list below, at versions
# inside transformers' and matplotlib's ranges; pydantic and httpx2 only for huggingface_hub 2);
# 35 wheels, 28 MiB are left (2026-12-04).
# The packages requirements/gpu.txt pins, numpy and pillow apart, always travel.
# SKIP_WHEELS= keeps them all.
#
# Environment: PYTHON (default python3), JOBS (pytest-xdist workers, default 4),
# ATTNLAB_REQUIRE_GPU (default 1: no CUDA fails; 0 rehearses on a CPU machine),
# BENCH=1 (after the checks, also `python -m benchmarks.run --publish`: the GPU
# sizes, written to benchmarks/results/gpu.{md,json,png} and
# attnlab/data/benchmarks_cuda.json; BENCH_ARGS are passed on).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
SITE=$PWD/.gpu-site

DEFAULT_SKIP="debugpy jedi widgetsnbextension numpy pillow fonttools pygments psutil huggingface_hub hf_xet tokenizers safetensors regex pyyaml tqdm typer click rich shellingham markdown_it_py mdurl annotated_doc anyio h11 idna filelock fsspec packaging pluggy iniconfig execnet coverage attrs contourpy cycler kiwisolver pyparsing python_dateutil typing_extensions tzdata pydantic pydantic_core annotated_types typing_inspection httpx2 httpcore2 truststore"

if [ "${1:-}" = "--download" ]; then
  wheels=${2:?usage: tools/gpu_check.sh --download WHEELS [PYTHON_VERSION]}
  version=${3:-$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')}
  "$PYTHON" -m pip download --quiet --dest "$wheels" --only-binary=:all: --python-version "$version" \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -r requirements/gpu.txt -c requirements/lock.txt
  for name in ${SKIP_WHEELS-$DEFAULT_SKIP}; do
    rm -f "$wheels/$name"-[0-9]*.whl
  done
  echo "wheels for Python $version in $wheels: $(ls "$wheels" | wc -l) files, $(du -sh "$wheels" | cut -f1)"
  exit 0
fi

if [ -n "${1:-}" ]; then
  "$PYTHON" -m pip install --quiet --no-index --no-deps --no-compile --target "$SITE" --upgrade "$1"/*.whl
fi
if [ -d "$SITE" ]; then
  export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export ATTNLAB_REQUIRE_GPU=${ATTNLAB_REQUIRE_GPU:-1}
[ "$ATTNLAB_REQUIRE_GPU" = 0 ] && unset ATTNLAB_REQUIRE_GPU

"$PYTHON" - <<'PY'
import importlib.metadata as metadata
import torch
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, GPU: {gpu}", flush=True)
print(", ".join(f"{name} {metadata.version(name)}" for name in
                ("numpy", "matplotlib", "transformers", "nbval", "ipykernel", "pytest")), flush=True)
PY

notebooks=""
for d in chapters/*/ solutions/*/; do
  if compgen -G "$d*.ipynb" >/dev/null; then notebooks="$notebooks ${d%/}"; fi
done
echo "notebooks:$notebooks"
start=$(date +%s)
status=0
"$PYTHON" -m pytest -p no:cacheprovider -q -rs -n "${JOBS:-4}" --dist loadfile \
  --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg $notebooks tests/test_gpu.py || status=$?
echo "GPU check: pytest exit status $status after $(( $(date +%s) - start )) s"
if [ "${BENCH:-0}" = 1 ]; then
  bench_start=$(date +%s)
  # shellcheck disable=SC2086
  "$PYTHON" -m benchmarks.run --publish ${BENCH_ARGS:-} || status=$?
  echo "benchmarks: exit status $status after $(( $(date +%s) - bench_start )) s"
fi
exit $status
