"""The response cache's variants under mpiexec (tests/_core/mpi_cache_variants.py)."""
import pytest


@pytest.mark.parametrize("n", [2, 3])
def test_unnamed_loops_of_any_length_hit_the_cache(mpirun, n):
    out = mpirun(n, "tests/_core/mpi_cache_variants.py", timeout=180, pytest_module=False,
                 env={"HVLITE_PROBE": "0"})
    assert out.count("variants ok") == n
