"""Small all-reduces riding in the negotiation round's agreement (agree.pyx), at N = 1..8
(oversubscribed on 2 cores), and switched off."""
import pytest


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_riding_allreduces_match_numpy(mpirun, n):
    mpirun(n, "tests/_core/mpi_agree.py", timeout=300)


def test_piggyback_off_rides_nothing(mpirun):
    mpirun(2, "tests/_core/mpi_agree.py", env={"HVLITE_PIGGYBACK_BYTES": "0"}, timeout=300)
