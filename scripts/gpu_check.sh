#!/usr/bin/env bash
# GPU check for hvlite, on a machine with an NVIDIA GPU: install what is needed (from the package
# index, or offline from --wheels DIR), build, run the GPU tests on 2 ranks sharing the GPU, and
# benchmark device all-reduce (staged, and CUDA-aware when the MPI is) against the device<->host
# copy bandwidth and, where torch with NCCL is present, a single-process NCCL all-reduce.
set -euo pipefail

usage() {
  cat <<USAGE
usage: scripts/gpu_check.sh [--wheels DIR] [--venv DIR] [--sizes "1 16 64"] [--skip-bench]
                            [--horovod DIR] [--system]
  --wheels DIR   install offline from the wheels in DIR (cupy, mpich, mpi4py, numpy, cython, ...)
  --horovod DIR  also run Horovod's torch tests (its test/parallel directory) on the GPU, where
                 torch with CUDA is importable (scripts/horovod_suite.sh)
  --venv DIR     virtual environment to create or reuse (default: .venv-gpu)
  --sizes LIST   all-reduce sizes in MiB for the benchmark (default: "1 16 64 256")
  --skip-bench   run the GPU tests only
  --system       let the environment see the system's packages (an image that already has CuPy,
                 torch with CUDA, Cython, NumPy) and install only what it lacks; mpich and
                 mpi4py are always installed into it, so that hvlite builds against that MPI
USAGE
}

WHEELS="" VENV=".venv-gpu" SIZES="1 16 64 256" BENCH=1 HOROVOD="" SYSTEM=0
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) [ $# -ge 2 ] || { echo "--wheels needs a directory" >&2; exit 2; }
              WHEELS="$2"; shift 2 ;;
    --venv) [ $# -ge 2 ] || { echo "--venv needs a directory" >&2; exit 2; }
            VENV="$2"; shift 2 ;;
    --sizes) [ $# -ge 2 ] || { echo "--sizes needs a list" >&2; exit 2; }
             SIZES="$2"; shift 2 ;;
    --skip-bench) BENCH=0; shift ;;
    --system) SYSTEM=1; shift ;;
    --horovod) [ $# -ge 2 ] || { echo "--horovod needs a directory" >&2; exit 2; }
               HOROVOD="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
if [ -n "$WHEELS" ] && [ ! -d "$WHEELS" ]; then
  echo "--wheels $WHEELS: not a directory" >&2; exit 2
fi
[ "${GPU_CHECK_PARSE_ONLY:-0}" = 1 ] && { echo "wheels=$WHEELS venv=$VENV sizes=$SIZES bench=$BENCH system=$SYSTEM"; exit 0; }

cd "$(dirname "$0")/.."
CUPY=cupy-cuda12x
if command -v nvidia-smi >/dev/null; then
  nvidia-smi -L
  # two ranks share one GPU here: a GPU in an exclusive compute mode refuses the second context
  nvidia-smi --query-gpu=compute_mode --format=csv,noheader | grep -qi exclusive \
    && echo "warning: the GPU's compute mode is exclusive; 2 ranks cannot share it (nvidia-smi -c 0)"
  # the CuPy wheel of the driver's CUDA major version (13 and later: cupy-cuda13x)
  CUDA_MAJOR="$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9]*\).*/\1/p' | head -1)"
  [ -n "$CUDA_MAJOR" ] && [ "$CUDA_MAJOR" -ge 13 ] && CUPY=cupy-cuda13x
else
  echo "warning: nvidia-smi not found"
fi
VENV_ARGS=()
[ "$SYSTEM" = 1 ] && VENV_ARGS=(--system-site-packages)
[ -x "$VENV/bin/python" ] || python3 -m venv "${VENV_ARGS[@]}" "$VENV"
PY="$VENV/bin/python"
if [ "$SYSTEM" = 1 ]; then
  # a python3 that is itself a virtual environment (an image's) lends its packages through a .pth
  # file: --system-site-packages alone would reach only the interpreter's base installation
  PARENT="$(python3 -c 'import site, sys; print(*site.getsitepackages(), sep="\n") if sys.prefix != sys.base_prefix else None')"
  if [ -n "$PARENT" ] && [ "$PARENT" != None ]; then
    echo "$PARENT" > "$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_parent_env.pth"
  fi
fi
PIP=("$PY" -m pip install -q)
[ -n "$WHEELS" ] && PIP+=(--no-index --find-links "$WHEELS")
# mpich and mpi4py go into the environment itself, even where the system has an mpi4py: hvlite
# is built against the MPI that mpi4py there loads
# mpi4py 4.0.3 and later: earlier 4.0.x freed CuPy 14's buffers twice when MPI read them
"${PIP[@]}" --ignore-installed mpich "mpi4py>=4.0.3"
WANT=()
# package=module pairs: with --system, a package whose module already imports is kept
for pm in setuptools=setuptools wheel=wheel "cython>=3.0=Cython" "numpy>=1.24=numpy" \
          pytest=pytest "$CUPY=cupy"; do
  pkg="${pm%=*}" mod="${pm##*=}"
  if [ "$SYSTEM" = 1 ] && "$PY" -c "import $mod" 2>/dev/null; then continue; fi
  WANT+=("$pkg")
done
[ ${#WANT[@]} = 0 ] || "${PIP[@]}" "${WANT[@]}"
"$PY" setup.py build_ext --inplace -j "$(nproc 2>/dev/null || echo 4)" >/dev/null
export PATH="$VENV/bin:$PATH" PYTHONPATH="$PWD"

# a failing part is reported and the others still run; the exit status says whether any failed
STATUS=0
echo "== GPU tests, 2 ranks sharing the GPU (torch CUDA tensors too, where torch has CUDA)"
"$PY" -m pytest -q -rs tests/gpu tests/torch/test_torch.py::test_cuda_tensors_on_a_stand_in \
  || STATUS=1
timeout -k 10 300 "$VENV/bin/mpiexec" -n 2 "$PY" -m pytest -q -p no:cacheprovider \
  tests/gpu/mpi_cuda.py || STATUS=1
if [ -n "$HOROVOD" ]; then
  echo "== Horovod's torch tests, CUDA ones included"
  # Horovod's tests put rank i on GPU local_rank(): with fewer GPUs than ranks, each rank is a
  # node of its own (HVLITE_LOCAL_SIZE=1), so every local_rank() is 0 and the ranks share GPU 0
  GPUS="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
  LOCAL=()
  [ "${GPUS:-0}" -lt 2 ] && LOCAL=(HVLITE_LOCAL_SIZE=1)
  env "${LOCAL[@]}" PYTHON="$PY" MPIEXEC="$VENV/bin/mpiexec" \
    scripts/horovod_suite.sh "$HOROVOD" 2 || STATUS=1
fi

[ "$BENCH" = 1 ] || exit $STATUS
echo "== benchmark (medians)"
timeout -k 10 600 "$VENV/bin/mpiexec" -n 2 "$PY" scripts/bench_gpu.py --sizes $SIZES --aware 0 \
  || STATUS=1
if "$PY" -c "import sys; from mpi4py import MPI; from hvlite.gpu import cuda_aware as c; sys.exit(0 if c.query_library()[0] else 1)"; then
  HVLITE_CUDA_AWARE=1 timeout -k 10 600 "$VENV/bin/mpiexec" -n 2 "$PY" scripts/bench_gpu.py \
    --sizes $SIZES --aware 1 || STATUS=1
else
  echo "(the MPI library is not CUDA-aware: no CUDA-aware rows)"
fi
if "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() and torch.distributed.is_nccl_available() else 1)" 2>/dev/null; then
  timeout -k 10 600 "$PY" scripts/bench_gpu.py --sizes $SIZES --nccl-reference || STATUS=1
else
  echo "(torch with NCCL not present: no NCCL reference rows)"
fi
exit $STATUS
