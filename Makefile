# hvlite: `make test` and `make demo` work on a fresh machine; both set up .venv first.
#
# MPI: by default the `mpich` wheel is installed into .venv and its mpicc builds the core.
# On a cluster, point MPICC at the system MPI's wrapper (Open MPI, Intel MPI, MPICH modules):
#     make install MPICC=$(which mpicc)
# mpi4py is then built from source against that MPI too, and its mpiexec runs the jobs.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
MPICC  ?=
NP     ?= 2
MPIEXEC ?= $(if $(MPICC),$(dir $(MPICC))mpiexec,$(VENV)/bin/mpiexec)
STAMP  := $(VENV)/.hvlite-installed
SOURCES := $(wildcard hvlite/_core/*.pyx hvlite/_core/*.pxd hvlite/_core/*.h hvlite/_core/*/*.pyx \
             hvlite/_core/*/*.pxd hvlite/_core/*/*.h) setup.py pyproject.toml

.PHONY: install test test-asan fuzz demo bench clean

install: $(STAMP)

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip "setuptools>=69" wheel

$(VENV)/.mpi: | $(VENV)/bin/python
ifeq ($(MPICC),)
	$(PIP) install -q mpich "mpi4py>=4.0"
else
	MPICC=$(MPICC) $(PIP) install -q --no-binary mpi4py "mpi4py>=4.0"
endif
	touch $@

# Built without build isolation: the extensions link against the venv's MPI and keep a RUNPATH
# into it (an isolated build would point into a temporary directory that is gone afterwards).
# torch is optional; it is pinned because an unpinned torch pulls a multi-GB CUDA build.
$(STAMP): $(SOURCES) $(VENV)/.mpi
	$(PIP) install -q "cython>=3.0" "numpy>=1.24" "torch==2.13.0"
	MPICC=$(MPICC) HVLITE_BUILD_JOBS=2 $(PIP) install -q --no-build-isolation -e ".[test,plot,examples]"
	touch $@

test: install
	$(PY) -m pytest tests -q

# The core under AddressSanitizer + UBSan: a copy of the package and tests in build/asan, its
# extensions built with -fsanitize=address,undefined, run with the compiler's libasan preloaded
# into Python (leak checks off: CPython's own allocations are not leaks). Any report aborts the
# rank, and the launching test fails showing its output.
ASAN_DIR  := build/asan
ASAN_ENV  := LD_PRELOAD=$$($(CC) -print-file-name=libasan.so) \
             ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:halt_on_error=1 \
             UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ASAN_TESTS ?= 'tests/test_work.py' 'tests/_core/test_coordinator.py::test_coordinator[2]' \
    'tests/_core/test_coordinator.py::test_coordinator[3]' 'tests/_core/test_coordinator.py::test_stall_check_and_shutdown' \
    'tests/_core/test_algorithms.py::test_allreduce_matrix[2]' 'tests/_core/test_algorithms.py::test_allreduce_matrix[3]' \
    'tests/_core/test_algorithms.py::test_shm_segments[3-0]' 'tests/test_collectives.py::test_errors[2]' \
    'tests/test_process_sets.py::test_process_sets[3]' 'tests/torch/test_torch.py::test_torch_collectives[2]' \
    'tests/torch/test_torch.py::test_torch_process_sets_and_compression[2]' \
    'tests/faults/test_lost.py::test_lost_rank[sigstop-3-last-small]' \
    'tests/faults/test_lost.py::test_silent_rank_is_named_and_stalls_fail[3]' \
    'tests/_core/test_calibrate.py::test_calibration[3]' \
    'tests/_core/test_algorithms.py::test_shm_segment_and_coordinator[4-env2]' \
    'tests/test_duplicate_names.py::test_duplicate_names[3]' \
    'tests/test_fork.py::test_forked_children_never_disturb_the_job[2]' \
    'tests/_core/test_wire_fuzz.py' 'tests/test_alltoall_bounds.py'

test-asan: install
	rm -rf $(ASAN_DIR) && mkdir -p $(ASAN_DIR)
	cp -r hvlite tests setup.py pyproject.toml $(ASAN_DIR)/
	find $(ASAN_DIR) \( -name '*.so' -o -name '__pycache__' \) -prune -exec rm -rf {} +
	cd $(ASAN_DIR) && HVLITE_SANITIZE=1 HVLITE_BUILD_JOBS=2 $(abspath $(PY)) setup.py -q build_ext --inplace -j 2
	cd $(ASAN_DIR) && $(ASAN_ENV) HVLITE_TEST_DROPS=2000 $(abspath $(PY)) -m pytest -q \
	    -p no:cacheprovider --durations=5 $(ASAN_TESTS)

# The fuzzer's long run: SEEDS seeds of OPS operations at each rank count (NP="2 3 4" by default
# here), one launch per 10 seeds under a hard timeout, taking turns over settings that must not
# change any result; prints a line per launch and the totals (operations, mismatches, hangs,
# crashes), and fails unless the last three are zero. `make test` runs a quick seed set.
SEEDS ?= 20
OPS   ?= 200
FUZZ_NP = $(if $(filter command line,$(origin NP)),$(NP),2 3 4)

fuzz: install
	$(PY) tests/fuzz/run_fuzz.py --np $(FUZZ_NP) --seeds $(SEEDS) --ops $(OPS) --mpiexec $(MPIEXEC)

# The main job: data-parallel training on 2 ranks with the timeline on, then the timeline's
# summary (how much communication hid behind compute) and its picture.
demo: install
	$(MPIEXEC) -n $(NP) $(PY) examples/train_digits.py --timeline demo_trace.json
	$(VENV)/bin/hvlite-timeline summary demo_trace.json --top 8
	$(VENV)/bin/hvlite-timeline plot demo_trace.json -o demo_timeline.png

bench: install
	$(MPIEXEC) -n $(NP) $(PY) scripts/bench_allreduce.py --csv bench_allreduce.csv --png bench_allreduce.png

clean:
	rm -rf build *.egg-info $(VENV)
	find hvlite/_core \( -name "*.c" -o -name "*.cpp" -o -name "*.so" \) -delete
