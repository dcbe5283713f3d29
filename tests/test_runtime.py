"""init / shutdown / re-init, topology and thread levels under mpiexec (tests/mpi_runtime.py)."""
import re

import pytest

from conftest import run_mpi


@pytest.mark.parametrize("n,env", [(1, {}), (3, {}), (4, {"HVLITE_LOCAL_SIZE": "3"}),
                                   (2, {"HVLITE_MPI_THREAD_LEVEL": "serialized"})])
def test_runtime(mpirun, n, env):
    mpirun(n, "tests/mpi_runtime.py", env=env)


def test_a_blocked_call_runs_signal_handlers_and_can_be_interrupted(tmp_path):
    """tests/interrupt_job.py: a wait looks at Python's signals every 0.1 s (a handler runs
    while rank 0 waits, Ctrl-C raises KeyboardInterrupt there), and the rank left waiting is
    told which rank went away."""
    with pytest.raises(pytest.fail.Exception) as info:
        run_mpi(2, "tests/interrupt_job.py", str(tmp_path / "left"), pytest_module=False,
                timeout=90)
    out = str(info.value)
    m = re.search(r"rank 0: handler after ([\d.]+) s, KeyboardInterrupt after ([\d.]+) s", out)
    assert m, out[-3000:]
    # the handler ran before the interrupt ended the wait (the peer came only after)
    assert float(m.group(1)) <= float(m.group(2)), m.group(0)
    assert "rank 1: ShutdownError: hvlite was shut down (shutdown() on rank 0)" in out, out[-3000:]
