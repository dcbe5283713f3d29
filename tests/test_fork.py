"""Fork safety under mpiexec (tests/fork_job.py): children forked after init() that call hvlite
fail alone, whichever way they leave, and the parents' job goes on and finalizes cleanly."""
import pytest


@pytest.mark.parametrize("n", [2, 3])
def test_forked_children_never_disturb_the_job(mpirun, n):
    out = mpirun(n, "tests/fork_job.py", timeout=180, pytest_module=False)
    assert f"fork job: {n} ok" in out, out[-3000:]
    assert "Fatal error" not in out and "PMI" not in out, out[-3000:]
