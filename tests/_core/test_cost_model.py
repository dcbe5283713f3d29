"""The cost model behind algorithm="auto": the formulas, and the choices they imply."""
import pytest

from hvlite._core.tuning.cost_model import choose_name, model_from, predict_seconds

SHM = model_from(alpha_intra=2e-6, beta_intra=1 / 4e9, alpha_inter=20e-6, beta_inter=1 / 1.2e9,
                 gamma=1 / 6e9)


def test_ring_formula():
    a, b, g, n, N = 2e-6, 1 / 4e9, 1 / 6e9, 1 << 20, 4
    want = 2 * (N - 1) * a + 2 * (N - 1) / N * n * b + (N - 1) / N * n * g
    assert predict_seconds("ring", n, N, SHM) == pytest.approx(want)


def test_tree_and_rhd_formulas():
    a, b, g, n = 2e-6, 1 / 4e9, 1 / 6e9, 4096
    assert predict_seconds("tree", n, 5, SHM) == pytest.approx(2 * 3 * (a + n * b) + 3 * n * g)
    fold = 2 * (a + n * b) + n * g
    assert predict_seconds("rhd", n, 5, SHM) == pytest.approx(2 * 2 * a + 0.75 * n * (2 * b + g) + fold)
    assert predict_seconds("rhd", n, 4, SHM) == pytest.approx(2 * 2 * a + 0.75 * n * (2 * b + g))
    assert predict_seconds("ring", n, 1, SHM) == 0


@pytest.mark.parametrize("L", [2, 3, 4])
def test_shm_reading_the_peers_directly_from_its_threshold(L):
    """With the peers' buffers read directly (one node, from (L-1) x 256 KiB) each rank moves
    only the others' part of its slice in and out: ((L-1)/L)n(2 beta_mem + gamma); below the
    threshold, or without it, the slots' n(2 beta_mem + ((L-1)/L) gamma)."""
    direct = dict(SHM, shm_direct=True)
    a, m, g = SHM["alpha_shm"], SHM["beta_mem"], SHM["gamma"]
    big, small = (L - 1) * (256 << 10), (L - 1) * (256 << 10) - 64
    assert predict_seconds("shm", big, L, direct) == pytest.approx(
        2 * a + (L - 1) / L * big * (2 * m + g))
    for model, n in ((direct, small), (SHM, big)):
        assert predict_seconds("shm", n, L, model) == pytest.approx(
            2 * a + n * (2 * m + (L - 1) / L * g))
    assert predict_seconds("shm", big, L, direct) < predict_seconds("shm", big, L, SHM)


@pytest.mark.parametrize("n", [2, 4, 5, 8, 16])
def test_tiny_buffers_pick_a_log_depth_algorithm(n):
    # (at N=3 the ring also needs only 2(N-1) = 4 messages, so it may win there)
    assert choose_name(64, n, SHM) in ("tree", "rhd", "rd")


@pytest.mark.parametrize("n", [3, 5, 6, 12])
def test_large_buffers_on_non_powers_of_two_pick_ring(n):
    assert choose_name(256 << 20, n, SHM) == "ring"


def test_several_nodes_pick_hierarchical_for_large_buffers():
    # on 2 nodes hierarchical sends n bytes per node across, a flat ring 2((N-1)/N)n
    assert choose_name(64 << 20, 8, SHM, nodes=2, local_size=4) == "hierarchical"
    # uneven nodes: the per-slice hierarchical variant does not apply
    assert choose_name(64 << 20, 7, SHM, nodes=2, local_size=4, uniform=False) != "hierarchical"
    # one node: never hierarchical
    assert choose_name(64 << 20, 8, SHM) != "hierarchical"


def test_the_cross_node_step_shares_the_node_link():
    # only the link costs here: a node's 4 slices cross at once through its one link, so per
    # node 2((H-1)/H)n bytes at beta_inter, against the flat ring's 2((N-1)/N)n
    b, n = 1 / 1e9, 64 << 20
    link_only = model_from(alpha_intra=0.0, beta_intra=1e-30, alpha_inter=0.0, beta_inter=b,
                           gamma=1e-30, alpha_shm=0.0, beta_mem=1e-30)
    for nodes in (2, 4, 8):
        want = 2 * (nodes - 1) / nodes * n * b
        for algo in ("hierarchical", "shm"):
            assert predict_seconds(algo, n, 4 * nodes, link_only, nodes=nodes, local_size=4) == \
                pytest.approx(want, rel=1e-6)
        assert predict_seconds("ring", n, 4 * nodes, link_only, nodes=nodes, local_size=4) == \
            pytest.approx(2 * (4 * nodes - 1) / (4 * nodes) * n * b, rel=1e-6)
