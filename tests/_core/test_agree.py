"""Small all-reduces riding in the negotiation round's agreement (negotiation/agree.pyx), at N = 1..8
(oversubscribed on 2 cores), on pretend nodes of one rank each (on one node with the shared
segment nothing rides: the segment is cheaper there), and switched off."""
import pytest

ACROSS = {"HVLITE_LOCAL_SIZE": "1"}


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_riding_allreduces_match_numpy(mpirun, n):
    alone = {"EXPECT_NO_RIDES": "1"} if n == 1 else {}      # one rank: its node's own segment
    mpirun(n, "tests/_core/mpi_agree.py", env={**ACROSS, **alone}, timeout=300)


@pytest.mark.parametrize("env", [{"HVLITE_PIGGYBACK_BYTES": "0", **ACROSS}, {}],
                         ids=["off", "one-node-with-shm"])
def test_nothing_rides_when_off_or_on_a_shared_segment(mpirun, env):
    mpirun(2, "tests/_core/mpi_agree.py", env={"EXPECT_NO_RIDES": "1", **env}, timeout=300)
