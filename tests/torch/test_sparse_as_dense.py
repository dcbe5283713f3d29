"""DistributedOptimizer(sparse_as_dense=True) with SparseAdam, at 2 and 3 ranks: gradients are
reduced dense and handed back sparse, as in Horovod (its test_sparse_embeddings)."""
import pytest


@pytest.mark.parametrize("n", [2, 3])
def test_sparse_as_dense_steps_sparse_adam(mpirun, n):
    pytest.importorskip("torch")
    mpirun(n, "tests/torch/mpi_torch_sparse.py", timeout=120)
