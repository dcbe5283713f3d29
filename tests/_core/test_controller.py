"""Rank 0's negotiation logic and the wire format, in one process: N simulated ranks encode
their submissions, the controller answers, and the response is decoded as every rank would."""
import pytest

from hvlite._core import codes
from hvlite._core.negotiation import wire
from hvlite._core.negotiation.controller import Controller

SUBMIT, PROBE = 0, 1
OK, ERROR = 0, 1
RANKS = [1, 2, 3, 5, 8]


def meta(coll="allreduce", dtype="float32", op="Sum", root=0, alg="auto", shape=(4,), error="",
         apart=0):
    return (codes.COLLECTIVES.index(coll), codes.DTYPES.index(dtype), codes.OPS.index(op), root,
            codes.ALGORITHMS.index(alg), tuple(shape), error, apart)


def sub(*records, stopping=False, joined=False):
    """One rank's submission: records are (name, meta) pairs."""
    return wire.encode_submission(stopping, joined, [(SUBMIT, name, m, 0) for name, m in records])


def respond(ctl, payloads, now=0.0):
    return wire.decode_response(ctl.respond(payloads, now), with_tune=False)


def names(resp):
    return [a[0] for a in resp["answers"]]


def answer(resp, name):
    found = [a for a in resp["answers"] if a[0] == name]
    assert len(found) == 1, resp
    return dict(zip(("name", "status", "slot", "meta", "message", "value", "late"), found[0]))


# ---- readiness ---------------------------------------------------------------------------------

@pytest.mark.parametrize("n", RANKS)
def test_ready_only_once_every_rank_submitted(n):
    ctl = Controller(n)
    for r in range(n):
        payloads = [b""] * n
        payloads[r] = sub(("grad", meta()))
        resp = respond(ctl, payloads)
        if r < n - 1:
            assert resp["answers"] == [] and ctl.waiting() == {"grad": list(range(r + 1))}
        else:
            a = answer(resp, "grad")
            assert a["status"] == OK and a["message"] == "" and a["meta"] == meta()
            assert ctl.waiting() == {}
            # the last rank arrived a round after the others (with one rank, nobody is late)
            assert a["late"] == ("" if n == 1 else str(n - 1))


@pytest.mark.parametrize("n", [2, 3, 5, 8])
@pytest.mark.parametrize("who", ["none", "one", "all"])
def test_the_answer_says_whether_any_rank_has_its_output_apart(n, who):
    """In place on some ranks and out of place on others is no disagreement (the results are
    the same); the answer carries whether any rank's output is apart, so every rank's auto
    times the call in the same class."""
    ctl = Controller(n, cache_capacity=4)
    apart = {"none": [0] * n, "one": [0] * (n - 1) + [1], "all": [1] * n}[who]
    resp = respond(ctl, [sub(("g", meta(apart=apart[r]))) for r in range(n)])
    a = answer(resp, "g")
    assert a["status"] == OK and a["message"] == "", a
    assert a["meta"] == meta(apart=int(who != "none"))
    # a rank that changes sides later still hits the cache: the flag is not compared
    assert ctl.lookup("g", meta(apart=1 - apart[0])) == a["slot"] >= 0


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_a_name_submitted_twice_by_one_rank_still_waits_for_the_others(n):
    ctl = Controller(n)
    payloads = [b""] * n
    payloads[0] = sub(("x", meta()))
    for _ in range(n):
        assert respond(ctl, payloads)["answers"] == []
    assert ctl.waiting() == {"x": [0]}


@pytest.mark.parametrize("n", RANKS)
def test_readiness_follows_first_submission_order(n):
    """The order every rank executes in: first submission across the rounds (ranks folded in
    rank order within a round), whatever order the other ranks submit in."""
    def run():
        ctl = Controller(n)
        first = [b""] * n
        first[0] = sub(("c", meta()), ("a", meta()))
        r1 = respond(ctl, first)
        second = [sub(("b", meta()))] + [sub(("b", meta()), ("a", meta()), ("c", meta()))] * (n - 1)
        if n > 1:
            second[n - 1] = sub(("c", meta()), ("b", meta()), ("a", meta()))
        return r1, respond(ctl, second), ctl
    r1, r2, ctl = run()
    if n == 1:
        assert names(r1) == ["c", "a"] and names(r2) == ["b"]
    else:
        assert names(r1) == [] and names(r2) == ["c", "a", "b"]
    # the same inputs give the same bytes
    again = Controller(n)
    p1 = [sub(("c", meta()), ("a", meta()))] + [b""] * (n - 1)
    p2 = [sub(("b", meta()))] + [sub(("b", meta()), ("a", meta()), ("c", meta()))] * (n - 1)
    if n > 1:
        p2[n - 1] = sub(("c", meta()), ("b", meta()), ("a", meta()))
    ctl2 = Controller(n)
    assert again.respond(p1) == ctl2.respond(p1) and again.respond(p2) == ctl2.respond(p2)


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_joined_ranks_count_as_submitted_until_every_rank_joins(n):
    ctl = Controller(n)
    payloads = [sub(("x", meta()))] * n
    payloads[1] = sub(("join", meta("join", shape=())))
    resp = respond(ctl, payloads)
    assert names(resp) == ["x"] and answer(resp, "x")["status"] == OK
    assert resp["joined_now"] == 1 and resp["joined_after"] == 1
    # an alltoall cannot run with a joined rank
    payloads = [sub(("t", meta("alltoall", shape=(n, 2))))] * n
    payloads[1] = b""
    a = answer(respond(ctl, payloads), "t")
    assert a["status"] == ERROR and "cannot run while some ranks have joined" in a["message"]
    # the others join, the last one last: join completes and names it
    order = [r for r in range(n) if r != 1]
    for k, r in enumerate(order):
        payloads = [b""] * n
        payloads[r] = sub(("join", meta("join", shape=())))
        resp = respond(ctl, payloads)
        if k < len(order) - 1:
            assert resp["answers"] == []
    a = answer(resp, "join")
    assert a["status"] == OK and a["value"] == order[-1] and resp["joined_after"] == 0


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("coll", ["allgather", "broadcast", "alltoall", "reducescatter"])
def test_only_allreduce_runs_with_a_joined_rank(n, coll):
    """Horovod refuses these after a join: the others get an error naming the joined rank at once
    (not a wait, not a run); allreduce still runs and join still completes."""
    ctl = Controller(n)
    payloads = [sub(("x", meta(coll, shape=(n, 2), root=n - 1)))] * n
    payloads[n - 1] = sub(("join", meta("join", shape=())))
    resp = respond(ctl, payloads)
    a = answer(resp, "x")
    assert a["status"] == ERROR and f"(rank {n - 1} joined)" in a["message"], a
    assert coll in a["message"] and resp["joined_after"] == 1
    payloads = [sub(("g", meta()))] * n
    payloads[n - 1] = b""
    assert answer(respond(ctl, payloads), "g")["status"] == OK
    payloads = [sub(("join", meta("join", shape=())))] * n
    payloads[n - 1] = b""
    a = answer(respond(ctl, payloads), "join")
    assert a["status"] == OK and a["value"] == n - 2


@pytest.mark.parametrize("coll", ["allgather", "broadcast", "alltoall", "reducescatter"])
def test_a_refused_collective_fails_without_waiting_for_the_other_ranks(coll):
    """Horovod's test_horovod_join_allgather at 3 ranks: the rank that joins first makes no
    allgather, so its automatic names fall one behind, and the next round's unnamed allgathers
    of the other two ranks carry different names. Each fails on its own, at once, naming the
    joined rank, instead of waiting for a rank that will submit it under another name (it hung);
    a rank that submits such a name later, while the join lasts, fails the same way. An
    all-reduce still waits for every rank that has not joined."""
    ctl = Controller(3)
    payloads = [sub(("g.0", meta(coll, shape=(3, 2)))), sub(("join", meta("join", shape=()))),
                sub(("g.1", meta(coll, shape=(3, 2))), ("r", meta()))]
    resp = respond(ctl, payloads)
    for name in ("g.0", "g.1"):
        a = answer(resp, name)
        assert a["status"] == ERROR and "(rank 1 joined)" in a["message"], a
    assert "r" not in names(resp)          # rank 0 has not submitted it: it waits
    resp = respond(ctl, [sub(("g.1", meta(coll, shape=(3, 2))), ("r", meta())), b"", b""])
    a = answer(resp, "g.1")
    assert a["status"] == ERROR and "(rank 1 joined)" in a["message"], a
    assert answer(resp, "r")["status"] == OK
    payloads = [sub(("join", meta("join", shape=())))] * 3
    payloads[1] = b""
    a = answer(respond(ctl, payloads), "join")
    assert a["status"] == OK and a["value"] in (0, 2)


def test_the_error_names_every_joined_rank():
    ctl = Controller(4)
    payloads = [sub(("join", meta("join", shape=())))] * 4
    payloads[0] = payloads[2] = sub(("b", meta("broadcast")))
    a = answer(respond(ctl, payloads), "b")
    assert a["status"] == ERROR and "(ranks 1, 3 joined)" in a["message"], a


@pytest.mark.parametrize("n", RANKS)
def test_stopping_ranks_are_named(n):
    ctl = Controller(n)
    payloads = [sub(stopping=(r % 2 == 1)) for r in range(n)]
    assert respond(ctl, payloads)["stopping"] == [r for r in range(n) if r % 2 == 1]


# ---- agreement ---------------------------------------------------------------------------------

MISMATCHES = [
    ("dtype", meta(dtype="float32"), meta(dtype="float64"), "float32", "float64"),
    ("shape", meta(shape=(4,)), meta(shape=(2, 2)), "(4,)", "(2, 2)"),
    ("op", meta(op="Sum"), meta(op="Max"), "Sum", "Max"),
    ("root rank", meta("broadcast", root=0), meta("broadcast", root=2), "0", "2"),
    ("algorithm", meta(alg="ring"), meta(alg="tree"), "ring", "tree"),
    ("collective", meta("allreduce"), meta("allgather"), "allreduce", "allgather"),
    ("shape after the first dimension", meta("allgather", shape=(3, 4)), meta("allgather", shape=(1, 5)),
     "(4,)", "(5,)"),
]


@pytest.mark.parametrize("n", [2, 3, 5, 8])
@pytest.mark.parametrize("field,good,bad,good_text,bad_text", MISMATCHES, ids=[m[0] for m in MISMATCHES])
def test_a_mismatch_fails_everywhere_naming_ranks_and_field(n, field, good, bad, good_text, bad_text):
    odd = {n - 1} | ({1} if n >= 3 else set())
    ctl = Controller(n, cache_capacity=4)
    resp = respond(ctl, [sub(("w", bad if r in odd else good)) for r in range(n)])
    a = answer(resp, "w")
    assert a["status"] == ERROR and a["slot"] == -1
    assert a["message"].startswith(f"{codes.COLLECTIVES[good[0]]} 'w' failed on every rank: "
                                   f"ranks disagree on {field}: ")
    for r in range(n):
        assert f"rank {r}: {bad_text if r in odd else good_text}" in a["message"]
    assert ctl.cache_slots() == {} and ctl.waiting() == {}


def test_agreeing_ranks_with_different_first_dimensions_are_fine_for_allgather():
    ctl = Controller(3)
    resp = respond(ctl, [sub(("g", meta("allgather", shape=(r + 1, 4)))) for r in range(3)])
    assert answer(resp, "g")["status"] == OK


def test_a_local_error_is_reported_with_its_rank():
    ctl = Controller(3)
    resp = respond(ctl, [sub(("e", meta(error="input is not contiguous" if r == 2 else ""))) for r in range(3)])
    a = answer(resp, "e")
    assert a["status"] == ERROR and "rank 2: input is not contiguous" in a["message"]


# ---- response cache ----------------------------------------------------------------------------

@pytest.mark.parametrize("n", RANKS)
def test_agreed_names_get_cache_slots_that_the_next_round_hits(n):
    ctl = Controller(n, cache_capacity=2)
    resp = respond(ctl, [sub(("a", meta()), ("g", meta("join")))] * n)
    a, g = answer(resp, "a"), answer(resp, "g")
    assert a["slot"] == 0 and g["slot"] == -1          # join is not cacheable
    assert ctl.cache_slots() == {"a": 0}
    # the next identical submission is a hit (the worker sends only its slot's bit) ...
    assert ctl.lookup("a", meta()) == 0
    # ... a changed shape misses (a new variant), a poisoned request drops the name
    # everywhere (STALE), an unknown name misses
    assert ctl.lookup("a", meta(shape=(5,))) == -1
    assert ctl.lookup("a", meta(error="bad dtype")) == -2
    assert ctl.lookup("b", meta()) == -1
    # sent to rank 0 again with the same metadata, the name moves to the free slot and leaves
    # its old one
    resp = respond(ctl, [sub(("a", meta()))] * n)
    assert answer(resp, "a")["slot"] == 1 and ctl.cache_slots() == {"a": 1}
    # agreed with another shape, the name holds both variants, and each hits
    resp = respond(ctl, [sub(("a", meta(shape=(5,))))] * n)
    assert answer(resp, "a")["slot"] == 0 and ctl.cache_slots() == {"a": [0, 1]}
    assert ctl.lookup("a", meta(shape=(5,))) == 0 and ctl.lookup("a", meta()) == 1


def test_allgather_alltoall_and_barrier_are_cached_join_is_not():
    ctl = Controller(2, cache_capacity=8)
    resp = respond(ctl, [sub(("g", meta("allgather", shape=(2, 3))), ("b", meta("barrier")),
                             ("t", meta("alltoall", shape=(2,))), ("j", meta("join")))] * 2)
    slots = {k: answer(resp, k)["slot"] for k in "gbtj"}
    assert slots["g"] >= 0 and slots["b"] >= 0 and slots["t"] >= 0 and slots["j"] == -1, slots


@pytest.mark.parametrize("coll", ["allgather", "alltoall"])
def test_rows_unlike_rank_0s_drop_the_cached_name_on_every_rank(coll):
    # the slot holds rank 0's first dimension: a rank whose own differs must not hit it while
    # the others do; it drops the name everywhere (STALE) and goes to rank 0 again
    ctl = Controller(2, cache_capacity=8)
    slot = answer(respond(ctl, [sub(("g", meta(coll, shape=(2, 3))))] * 2), "g")["slot"]
    assert slot >= 0
    assert ctl.lookup("g", meta(coll, shape=(2, 3))) == slot
    assert ctl.lookup("g", meta(coll, shape=(4, 3))) == -2
    assert ctl.lookup("g", meta("allreduce", shape=(4, 3))) == -1


def test_a_full_cache_evicts_the_least_recently_used_slot():
    ctl = Controller(2, cache_capacity=2)
    respond(ctl, [sub(("a", meta()))] * 2)
    respond(ctl, [sub(("b", meta()))] * 2)
    resp = respond(ctl, [sub(("c", meta()))] * 2)
    assert answer(resp, "c")["slot"] == 0
    assert ctl.cache_slots() == {"c": 0, "b": 1}
    assert ctl.lookup("a", meta()) == -1


# ---- stall report ------------------------------------------------------------------------------

def test_a_stall_past_the_shutdown_time_is_fatal_and_names_the_missing_ranks(capfd):
    ctl = Controller(3, stall_check=1.0, stall_shutdown=5.0)
    assert respond(ctl, [sub(("x", meta())), b"", b""], now=0.0)["fatal"] == ""
    resp = respond(ctl, [b"", sub(), sub()], now=2.0)
    assert resp["fatal"] == ""
    assert "hvlite: stall: allreduce 'x' has waited 2 s; ranks that have not submitted it: [1, 2]" \
        in capfd.readouterr().err
    resp = respond(ctl, [b"", sub(("x", meta())), b""], now=6.0)
    assert resp["fatal"] == ("stall: allreduce 'x' has waited 6 s; ranks that have not submitted "
                             "it: [2] (HVLITE_STALL_SHUTDOWN_TIME_SECONDS exceeded)")


def test_probed_names_report_the_ranks_that_are_not_waiting(capfd):
    ctl = Controller(3, stall_check=1.0)
    probe = wire.encode_submission(False, False, [(PROBE, "p", meta(), 3_000_000)])
    resp = respond(ctl, [probe, probe, sub()], now=0.0)
    assert resp["fatal"] == "" and resp["answers"] == [] and ctl.waiting() == {}
    assert "hvlite: stall: 'p' has waited 3 s; ranks that have not submitted it: [2]" in capfd.readouterr().err


# ---- wire roundtrips ---------------------------------------------------------------------------

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
NAMES = ["", "x", "grad/layer.0/weight", "é∑😀", "n" * 100_000]
SHAPES = [(), (0,), (3, 0, 2), (I64_MAX, 0, 1), tuple(range(64))]   # negative: refused (test_wire_fuzz)


@pytest.mark.parametrize("name", NAMES, ids=["empty", "short", "path", "unicode", "long"])
@pytest.mark.parametrize("shape", SHAPES, ids=["scalar", "zero", "zeros", "extremes", "rank64"])
def test_submission_roundtrip(name, shape):
    recs = [(SUBMIT, name, meta(shape=shape), I64_MAX), (PROBE, name + "!", meta("broadcast", root=7,
                                                                                  shape=shape, error=name), I64_MIN),
            (SUBMIT, "", meta("join", shape=()), 0)]
    for stopping, joined in [(False, False), (True, False), (False, True), (True, True)]:
        data = wire.encode_submission(stopping, joined, recs)
        assert wire.decode_submission(data) == (stopping, joined, recs)


def test_submission_header_alone_is_sixteen_bytes_of_int64s():
    assert wire.encode_submission(True, False) == (1).to_bytes(8, "little") + bytes(8)
    assert wire.decode_submission(wire.encode_submission(False, True)) == (False, True, [])


@pytest.mark.parametrize("name", NAMES, ids=["empty", "short", "path", "unicode", "long"])
@pytest.mark.parametrize("tune", [None, (64 << 20, 2_500_000), (I64_MAX, 0)])
def test_response_roundtrip(name, tune):
    answers = [(name, OK, 3, meta(shape=(0, I64_MAX)), "", -1, ""),
               (name + "2", ERROR, -1, meta("broadcast", root=4), "bad " + name, I64_MIN, "1,3"),
               ("j", OK, -1, meta("join", shape=()), "", 7, "")]
    data = wire.encode_response(stopping=[0, 5, I64_MAX], fatal="stall " + name, joined_after=2,
                                joined_now=I64_MIN, answers=answers, tune=tune)
    got = wire.decode_response(data)
    assert got == {"stopping": [0, 5, I64_MAX], "fatal": "stall " + name, "joined_after": 2,
                   "joined_now": I64_MIN, "answers": answers, "tune": tune, "rest": 0}


def test_controller_response_decodes_with_the_coordinators_reader():
    ctl = Controller(2, cache_capacity=1)
    raw = ctl.respond([sub(("a", meta()), stopping=True), sub(("a", meta()))])
    got = wire.decode_response(raw, with_tune=False)
    assert got["rest"] == 0 and got["stopping"] == [0] and names(got) == ["a"]
    # the coordinator appends the autotune tail; the head and answers read the same after it
    tail = wire.encode_response(tune=(1, 2))[-32:]
    both = wire.decode_response(raw + tail)
    assert both["tune"] == (1, 2) and both["answers"] == got["answers"] and both["rest"] == 0


@pytest.mark.parametrize("cut", [0, 1, 8, 15, 16, 17, 40, 100])
def test_truncated_messages_are_refused(cut):
    data = wire.encode_submission(False, False, [(SUBMIT, "name" * 10, meta(shape=(1, 2, 3)), 5)])
    if cut == 16:       # the header alone is a whole submission: no records
        assert wire.decode_submission(data[:cut]) == (False, False, [])
    else:
        with pytest.raises(ValueError, match=f"malformed submission: a field at byte \\d+ of {cut}"):
            wire.decode_submission(data[:cut])
    resp = wire.encode_response(stopping=[1], answers=[("n" * 30, OK, 0, meta(), "", -1, "")])
    with pytest.raises(ValueError, match=f"malformed response: a field at byte \\d+ of {cut}"):
        wire.decode_response(resp[:cut])
