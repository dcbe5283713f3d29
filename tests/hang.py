"""Deliberately hangs on rank 1 (used to test that the harness's timeout fires)."""
import time

from mpi4py import MPI

if MPI.COMM_WORLD.Get_rank() == 1:
    print("rank 1 waiting forever", flush=True)
    while True:
        time.sleep(1)
MPI.COMM_WORLD.Barrier()
