"""The alpha-beta cost model behind algorithm="auto".

N ranks, n bytes, α seconds per message, β seconds per byte sent, γ seconds per byte reduced,
L = log2 of the largest power of two p <= N:

    tree          2⌈log2 N⌉(α + nβ) + ⌈log2 N⌉nγ
    rd            Lα + L·n(β + γ)                    (+ the same fold as rhd when N != p)
    rhd           2Lα + 2((p-1)/p)nβ + ((p-1)/p)nγ   (+ 2(α + nβ) + nγ to fold when N != p)
    ring          2(N-1)α + 2((N-1)/N)nβ + ((N-1)/N)nγ
    hierarchical  ring among the L_node ranks of a node at intra-node α, β
                  + the best of rd/rhd/ring among the nodes on n/L_node bytes at inter-node α
                  and L_node·β_inter (below)
    shm           2α_shm + n(2β_mem + ((L_node-1)/L_node)γ) within the node (copy in, reduce
                  a slice, copy out) + the same cross-node step as hierarchical; reading the
                  peers' buffers directly (one node, from (L_node-1) x 256 KiB), 2α_shm +
                  ((L_node-1)/L_node)n(2β_mem + γ): each rank reads the others' part of its
                  slice, reduces it and writes the result into the others' outputs

β_inter is per byte through one node's link, which all of the node's ranks share. Flat
algorithms on several nodes pay the inter-node figures (their slowest link): a ring placed node
by node has one rank of each node sending across at a time, so its formula holds as written. The
cross-node step of hierarchical and shm runs L_node slices at once, one per local rank, all
through the same link: per node 2((H-1)/H)n bytes cross for H nodes, hence L_node·β_inter on
n/L_node bytes (with β_inter alone it predicted 0.3-0.5 of the time measured on 2 hosts of 2
ranks). rhd keeps its flat formula: nearest partner first, it moves 2(1 - L_node/p)n per node,
fewer bytes than the formula says (n rather than 1.5n on 2 hosts of 2 ranks), but on the emulated
links it took 1.05-1.7x its own bytes' link time at 4-64 MiB, on 2 hosts of 2 and on 4 hosts of 1
(where a ring moving the same bytes per host reached 79-91% of the link). The flat formula is the
closer prediction on 2 hosts of 2; on 4 hosts of 1 neither fits, rhd measured ~1.6x it
(docs/scale.md). At many nodes the two formulas differ by under L_node/p.
`auto` picks the smallest prediction; MPI's own MPI_Allreduce is the reference, never chosen.
"""
from libc.math cimport ceil, log2

from hvlite._core.codes import ALGORITHMS    # the table in codes.h



cdef double _flat(int algo, double n_bytes, int n, double a, double b, double g) noexcept nogil:
    cdef int p = 1
    cdef double lg, cost
    if n <= 1:
        return 0.0
    if algo == ALG_TREE:
        lg = ceil(log2(n))
        return 2 * lg * (a + n_bytes * b) + lg * n_bytes * g
    if algo == ALG_RING:
        return 2 * (n - 1) * a + (n - 1.0) / n * n_bytes * (2 * b + g)
    while p * 2 <= n:
        p *= 2
    if algo == ALG_RD:
        cost = log2(p) * (a + n_bytes * (b + g))
    else:
        cost = 2 * log2(p) * a + (p - 1.0) / p * n_bytes * (2 * b + g)
    if p != n:
        cost += 2 * (a + n_bytes * b) + n_bytes * g
    return cost


cdef double predict(int algo, double nbytes, int n, int nodes, int local_size,
                    const CostModel* m) noexcept nogil:
    cdef double a = m.alpha_inter if nodes > 1 else m.alpha_intra
    cdef double b = m.beta_inter if nodes > 1 else m.beta_intra
    cdef double inner, x1, x2
    if algo == ALG_HIERARCHICAL or algo == ALG_SHM:
        if algo == ALG_SHM and m.shm_direct and local_size > 1 and nbytes >= (local_size - 1) * 262144.0:
            inner = 2 * m.alpha_shm + nbytes * (local_size - 1.0) / local_size * (2 * m.beta_mem + m.gamma)
        elif algo == ALG_SHM:
            inner = 0.0 if local_size <= 1 else (
                2 * m.alpha_shm + nbytes * (2 * m.beta_mem + (local_size - 1.0) / local_size * m.gamma))
        else:
            inner = _flat(ALG_RING, nbytes, local_size, m.alpha_intra, m.beta_intra, m.gamma)
        if nodes <= 1:
            return inner
        # the node's local_size slices cross at once, sharing its link
        shared = m.beta_inter * local_size
        x1 = _flat(ALG_RHD, nbytes / local_size, nodes, m.alpha_inter, shared, m.gamma)
        x2 = _flat(ALG_RING, nbytes / local_size, nodes, m.alpha_inter, shared, m.gamma)
        x1 = x1 if x1 < x2 else x2
        x2 = _flat(ALG_RD, nbytes / local_size, nodes, m.alpha_inter, shared, m.gamma)
        return inner + (x1 if x1 < x2 else x2)
    return _flat(algo, nbytes, n, a, b, m.gamma)


cdef bint eligible(int algo, int nodes, int local_size, bint uniform, bint shm) noexcept nogil:
    if algo == ALG_HIERARCHICAL:
        return nodes > 1 and uniform and not shm   # with a shared segment it *is* shm across nodes
    if algo == ALG_SHM:
        return shm and uniform and local_size > 1
    return algo == ALG_TREE or algo == ALG_RD or algo == ALG_RING or algo == ALG_RHD


cdef int choose(double nbytes, int n, int nodes, int local_size, bint uniform, bint shm,
                const CostModel* m) noexcept nogil:
    cdef int best = ALG_TREE, algo, i
    cdef int candidates[5]
    # ties go to the earlier: at N = 2 ring and rhd predict the same, and ring's pipelined
    # segments measured 5-10% faster from 256 KiB to 1 MiB (docs/benchmarks.md)
    candidates[:] = [ALG_RD, ALG_RING, ALG_RHD, ALG_HIERARCHICAL, ALG_SHM]
    cdef double cost, best_cost = predict(ALG_TREE, nbytes, n, nodes, local_size, m)
    for i in range(5):
        algo = candidates[i]
        if not eligible(algo, nodes, local_size, uniform, shm):
            continue
        cost = predict(algo, nbytes, n, nodes, local_size, m)
        if cost < best_cost:
            best, best_cost = algo, cost
    return best


def model_from(alpha_intra, beta_intra, alpha_inter=None, beta_inter=None, gamma=None,
               alpha_shm=1e-6, beta_mem=None, shm_direct=False):
    """A CostModel as a dict (Python view of the struct)."""
    return {"shm_direct": shm_direct, "alpha_intra": alpha_intra, "beta_intra": beta_intra,
            "alpha_inter": alpha_inter if alpha_inter is not None else alpha_intra,
            "beta_inter": beta_inter if beta_inter is not None else beta_intra,
            "gamma": gamma if gamma is not None else beta_intra,
            "alpha_shm": alpha_shm, "beta_mem": beta_mem if beta_mem is not None else beta_intra / 4}


def complete(dict model):
    """The model with what its maker may leave out filled in (no direct reads)."""
    return model if "shm_direct" in model else dict(model, shm_direct=False)


def predict_seconds(str algorithm, double nbytes, int n, dict model, int nodes=1, int local_size=0):
    cdef CostModel m = complete(model)
    if ALGORITHMS.code(algorithm) is None:
        raise KeyError(f"unknown algorithm {algorithm!r}; the table: {', '.join(ALGORITHMS)}")
    return predict(ALGORITHMS.code(algorithm), nbytes, n, nodes, local_size or n, &m)


def choose_name(double nbytes, int n, dict model, int nodes=1, int local_size=0, bint uniform=True,
                bint shm=False):
    cdef CostModel m = complete(model)
    return ALGORITHMS[choose(nbytes, n, nodes, local_size or n, uniform, shm, &m)]


def crossovers(int n, dict model, int nodes=1, int local_size=0, bint uniform=True, bint shm=False):
    """Where auto's choice changes, from 1 byte to 1 GiB: "rd < 16 KiB <= rhd < ..."."""
    cdef CostModel m = complete(model)
    parts, last = [], None
    for k in range(0, 31):
        algo = ALGORITHMS[choose(float(1 << k), n, nodes, local_size or n, uniform, shm, &m)]
        if algo != last:
            if last is not None:
                parts.append(_human(1 << k))
            parts.append(algo)
            last = algo
    out = parts[0]
    for i in range(1, len(parts), 2):       # parts: algo, size, algo, size, algo ...
        out += f" < {parts[i]} <= {parts[i + 1]}"
    return out


def _human(n):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n // k} {unit}"
    return f"{n} B"
