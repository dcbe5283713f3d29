"""The lean face (hvlite/_core/lean.pyx): every plain all-reduce taken and exact, everything else
left to the general path, at N = 1, 2, 3 (oversubscribed on 2 cores), and with the segment off
(algorithm='shm' refused by every call)."""
import pytest


@pytest.mark.parametrize("n", [1, 2, 3])
def test_lean_face(mpirun, n):
    mpirun(n, "tests/_core/mpi_lean.py", timeout=300)


def test_lean_face_without_the_segment(mpirun):
    mpirun(2, "tests/_core/mpi_lean.py", env={"HVLITE_SHM": "0"}, timeout=300)
