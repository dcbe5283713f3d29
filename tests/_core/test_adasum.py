"""Adasum: the pairwise kernel in process (no MPI), and the collective under mpiexec at 1-8 ranks
(powers of two and the fold for the others) against the NumPy reference in tests/helpers.py."""
import numpy as np
import pytest

from helpers import BF16, adasum_close, adasum_pair, adasum_reference, same_bits

FLOATS = [np.dtype(d) for d in ("float16", "float32", "float64")] + ([BF16] if BF16 else [])


def _pair(a, b):
    from hvlite._core.algorithms import adasum
    return adasum.pair(a, b)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_a_vector_with_itself_is_itself(dtype):
    a = np.random.default_rng(0).standard_normal(1001).astype(dtype)
    assert same_bits(_pair(a, a), a)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_orthogonal_vectors_add(dtype):
    a = np.array([1, 2, 0, 0, 3, -1], dtype)
    b = np.array([0, 0, 5, 4, 1, 3], dtype)         # a.b = 0 with overlapping supports
    assert same_bits(_pair(a, b), (a.astype(np.float64) + b).astype(dtype))
    assert same_bits(_pair(b, a), (a.astype(np.float64) + b).astype(dtype))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_zero_vectors_have_no_correction_term(dtype):
    b = np.random.default_rng(1).standard_normal(17).astype(dtype)
    z = np.zeros(17, dtype)
    assert same_bits(_pair(z, b), b) and same_bits(_pair(b, z), b)
    assert same_bits(_pair(z, z), z)


def test_parallel_vectors_average_and_opposite_ones_cancel_to_the_formula():
    a = np.array([1.0, 2.0, 2.0])
    assert same_bits(_pair(a, 3 * a), 2 * a)        # (1 - 3/2) a + (1 - 1/6) 3a = 2a
    assert same_bits(_pair(a, -a), 0 * a)           # 3/2 a - 3/2 a


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_the_kernel_matches_the_formula(dtype):
    rng = np.random.default_rng(2)
    for n in (0, 1, 3, 4, 5, 255, 256, 257, 10001):
        a, b = (rng.standard_normal(n).astype(dtype) for _ in range(2))
        assert adasum_close(_pair(a, b), adasum_pair(a, b), 1), n
        ints = [rng.integers(-8, 9, n).astype(dtype) for _ in range(2)]    # exact dot products
        assert same_bits(_pair(*ints), adasum_pair(*ints)), n


def test_the_reference_pairs_as_the_core_folds():
    """Five ranks: (0,1) fold first, then ((01),2), (3,4) and the pair of those."""
    v = [np.random.default_rng(r).standard_normal(5) for r in range(5)]
    p = adasum_pair
    want = p(p(p(v[0], v[1]), v[2]), p(v[3], v[4]))
    assert same_bits(adasum_reference(v), want)


def test_non_float_dtypes_are_refused_by_the_kernel():
    with pytest.raises(TypeError, match="int32"):
        _pair(np.ones(2, np.int32), np.ones(2, np.int32))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
def test_adasum_collective(mpirun, n):
    mpirun(n, "tests/_core/mpi_adasum.py", env={"HVLITE_CYCLE_TIME": "5"}, timeout=300)
