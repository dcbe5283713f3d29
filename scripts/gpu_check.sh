#!/usr/bin/env bash
# GPU check for hvlite, on a machine with an NVIDIA GPU: install what is needed (from the package
# index, or offline from --wheels DIR), build, run the GPU tests on 2 ranks sharing the GPU, and
# benchmark device all-reduce (staged, and CUDA-aware when the MPI is) against the device<->host
# copy bandwidth and, where torch with NCCL is present, a single-process NCCL all-reduce.
set -euo pipefail

usage() {
  cat <<USAGE
usage: scripts/gpu_check.sh [--wheels DIR] [--venv DIR] [--sizes "1 16 64"] [--skip-bench]
                            [--horovod DIR]
  --wheels DIR   install offline from the wheels in DIR (cupy, mpich, mpi4py, numpy, cython, ...)
  --horovod DIR  also run Horovod's torch tests (its test/parallel directory) on the GPU, where
                 torch with CUDA is importable (scripts/horovod_suite.sh)
  --venv DIR     virtual environment to create or reuse (default: .venv-gpu)
  --sizes LIST   all-reduce sizes in MiB for the benchmark (default: "1 16 64 256")
  --skip-bench   run the GPU tests only
USAGE
}

WHEELS="" VENV=".venv-gpu" SIZES="1 16 64 256" BENCH=1 HOROVOD=""
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) [ $# -ge 2 ] || { echo "--wheels needs a directory" >&2; exit 2; }
              WHEELS="$2"; shift 2 ;;
    --venv) [ $# -ge 2 ] || { echo "--venv needs a directory" >&2; exit 2; }
            VENV="$2"; shift 2 ;;
    --sizes) [ $# -ge 2 ] || { echo "--sizes needs a list" >&2; exit 2; }
             SIZES="$2"; shift 2 ;;
    --skip-bench) BENCH=0; shift ;;
    --horovod) [ $# -ge 2 ] || { echo "--horovod needs a directory" >&2; exit 2; }
               HOROVOD="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
if [ -n "$WHEELS" ] && [ ! -d "$WHEELS" ]; then
  echo "--wheels $WHEELS: not a directory" >&2; exit 2
fi
[ "${GPU_CHECK_PARSE_ONLY:-0}" = 1 ] && { echo "wheels=$WHEELS venv=$VENV sizes=$SIZES bench=$BENCH"; exit 0; }

cd "$(dirname "$0")/.."
command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "warning: nvidia-smi not found"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PY="$VENV/bin/python"
PIP=("$PY" -m pip install -q)
[ -n "$WHEELS" ] && PIP+=(--no-index --find-links "$WHEELS")
"${PIP[@]}" setuptools wheel "cython>=3.0" "numpy>=1.24" "mpi4py>=4.0" mpich pytest cupy-cuda12x
"$PY" setup.py build_ext --inplace -j 4 >/dev/null
export PATH="$VENV/bin:$PATH" PYTHONPATH="$PWD"

echo "== GPU tests, 2 ranks sharing the GPU (torch CUDA tensors too, where torch has CUDA)"
"$PY" -m pytest -q -rs tests/gpu tests/torch/test_torch.py::test_cuda_tensors_on_a_stand_in
"$VENV/bin/mpiexec" -n 2 "$PY" -m pytest -q -p no:cacheprovider tests/gpu/mpi_cuda.py
if [ -n "$HOROVOD" ]; then
  echo "== Horovod's torch tests, CUDA ones included"
  PYTHON="$PY" MPIEXEC="$VENV/bin/mpiexec" scripts/horovod_suite.sh "$HOROVOD" 2
fi

[ "$BENCH" = 1 ] || exit 0
echo "== benchmark (medians)"
"$VENV/bin/mpiexec" -n 2 "$PY" scripts/bench_gpu.py --sizes $SIZES --aware 0
if "$PY" -c "import sys; from mpi4py import MPI; from hvlite.gpu import cuda_aware as c; sys.exit(0 if c.query_library()[0] else 1)"; then
  HVLITE_CUDA_AWARE=1 "$VENV/bin/mpiexec" -n 2 "$PY" scripts/bench_gpu.py --sizes $SIZES --aware 1
else
  echo "(the MPI library is not CUDA-aware: no CUDA-aware rows)"
fi
if "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() and torch.distributed.is_nccl_available() else 1)" 2>/dev/null; then
  "$PY" scripts/bench_gpu.py --sizes $SIZES --nccl-reference
else
  echo "(torch with NCCL not present: no NCCL reference rows)"
fi
