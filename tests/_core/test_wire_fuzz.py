"""The negotiation decoders against hostile bytes: truncated, mutated, random and planted
messages (negative or huge lengths and counts, impossible codes). Each either decodes or raises
ValueError naming where it stopped -- never a read past the buffer (make test-asan runs this
under AddressSanitizer), never an allocation sized by a peer's number. Rank 0's controller turns
an unreadable submission into a fatal answer naming the rank. HVLITE_WIRE_FUZZ_CASES sets the
number of cases (100,000 by default)."""
import os
import random
import struct
import time

import pytest

from hvlite._core import codes
from hvlite._core.negotiation import wire
from hvlite._core.negotiation.controller import Controller

CASES = int(os.environ.get("HVLITE_WIRE_FUZZ_CASES", "100000"))
I64 = struct.Struct("=q")


def meta(rng):
    return (rng.randrange(len(codes.COLLECTIVES)), rng.randrange(len(codes.DTYPES)),
            rng.randrange(len(codes.OPS)), rng.randrange(4), rng.randrange(len(codes.ALGORITHMS)),
            tuple(rng.randrange(9) for _ in range(rng.randrange(4))),
            rng.choice(["", "DtypeError: bad"]), rng.randrange(2))


def submission(rng):
    return wire.encode_submission(rng.random() < 0.1, rng.random() < 0.1, [
        (rng.randrange(2), f"t.{rng.randrange(1000)}", meta(rng), rng.randrange(10 ** 6))
        for _ in range(rng.randrange(5))])


def response(rng):
    return wire.encode_response(
        stopping=[rng.randrange(8) for _ in range(rng.randrange(3))],
        fatal=rng.choice(["", "stalled"]), joined_after=rng.randrange(3), joined_now=rng.randrange(3),
        answers=[(f"t.{i}", rng.randrange(2), rng.randrange(-1, 8), meta(rng), "", -1, "")
                 for i in range(rng.randrange(5))],
        tune=rng.choice([None, (1 << 20, 2500000)]))


def mutate(rng, data):
    kind = rng.randrange(5)
    if kind == 0 or not data:                  # random bytes
        return bytes(rng.randrange(256) for _ in range(rng.randrange(64)))
    if kind == 1:                              # cut short
        return data[:rng.randrange(len(data))]
    b = bytearray(data)
    if kind == 2:                              # flipped bytes
        for _ in range(rng.randrange(1, 4)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        return bytes(b)
    # a planted 64-bit field: a length, count or code no honest rank sends
    at = rng.randrange(0, max(1, len(b) - 7), 8) if len(b) >= 8 else 0
    value = rng.choice([-1, -(2 ** 63), 2 ** 63 - 1, 2 ** 31, 2 ** 40, len(b) + 1, 10 ** 12])
    b[at:at + 8] = I64.pack(value)[:len(b) - at]
    return bytes(b)


def decode(data, which):
    try:
        if which == 0:
            wire.decode_submission(data)
        else:
            wire.decode_response(data)
        return "ok"
    except ValueError as e:
        assert "malformed" in str(e) and "byte" in str(e), e
        return "refused"


def test_decoders_survive_hostile_messages():
    rng = random.Random(20261125)
    seen = {"ok": 0, "refused": 0}
    t0 = time.monotonic()
    for i in range(CASES):
        which = i % 2
        data = mutate(rng, submission(rng) if which == 0 else response(rng))
        seen[decode(data, which)] += 1
    # both outcomes occur: the cases reach the checks, and honest-looking bytes still decode
    assert seen["refused"] > CASES // 10 and seen["ok"] > CASES // 20, seen
    assert time.monotonic() - t0 < 600


@pytest.mark.parametrize("value", [-1, -(2 ** 63), 2 ** 63 - 1, 2 ** 40])
def test_planted_lengths_and_counts_are_refused(value):
    m = (0, 2, 0, 0, 0, (4,), "", 0)
    good = wire.encode_submission(False, False, [(0, "grad", m, 0)])
    # [stopping, joined, kind, len(name)=4, b"grad", collective, dtype, op, root, alg, ndim, ...]
    for field in (3, 11):                       # the name's length, the shape's dimensions
        at = 8 * field if field == 3 else 8 * 3 + 8 + 4 + 8 * 5
        bad = good[:at] + I64.pack(value) + good[at + 8:]
        with pytest.raises(ValueError, match="malformed submission"):
            wire.decode_submission(bad)
    resp = wire.encode_response(answers=[("grad", 0, 1, m, "", -1, "")])
    for at in (0, 8 * 5):                       # the stopping count, the answer count
        with pytest.raises(ValueError, match="malformed response"):
            wire.decode_response(resp[:at] + I64.pack(value) + resp[at + 8:])


def test_impossible_codes_are_refused():
    for bad in [(99, 2, 0, 0, 0, (4,), "", 0), (0, len(codes.DTYPES), 0, 0, 0, (4,), "", 0),
                (0, 2, -1, 0, 0, (4,), "", 0), (0, 2, 0, 0, 8, (4,), "", 0),
                (0, 2, 0, 0, 0, (-4,), "", 0)]:
        with pytest.raises(ValueError, match="malformed submission"):
            wire.decode_submission(wire.encode_submission(False, False, [(0, "g", bad, 0)]))


@pytest.mark.parametrize("field, value", [(0, 2 ** 32), (0, 2 ** 32 + 1), (3, 2 ** 32),
                                          (3, -(2 ** 31) - 1), (4, 2 ** 40)])
@pytest.mark.parametrize("error", ["", "DtypeError: bad"])
def test_codes_past_ints_range_are_refused_not_cut(field, value, error):
    """A code or root past int's range was cut to its low bits (2**32 read as allreduce, code 0)
    and passed the table checks; now the field itself is malformed, poisoned requests too."""
    m = (0, 2, 0, 0, 0, (4,), error, 0)
    good = wire.encode_submission(False, False, [(0, "grad", m, 0)])
    # [stopping, joined, kind, len(name)=4, b"grad", collective, dtype, op, root, alg, ...]
    at = 8 * 3 + 8 + 4 + 8 * field
    assert wire.decode_submission(good)
    with pytest.raises(ValueError, match="malformed submission"):
        wire.decode_submission(good[:at] + I64.pack(value) + good[at + 8:])


def test_an_unreadable_submission_is_fatal_and_names_the_rank():
    ctl = Controller(3, cache_capacity=8)
    m = (0, 2, 0, 0, 0, (4,), "", 0)
    good = wire.encode_submission(False, False, [(0, "grad", m, 0)])
    resp = wire.decode_response(ctl.respond([good, good[:-5], good]), with_tune=False)
    assert "rank 1 sent a malformed negotiation message" in resp["fatal"], resp
    # the honest ranks' next round still works
    ctl = Controller(2, cache_capacity=8)
    resp = wire.decode_response(ctl.respond([good, good]), with_tune=False)
    assert resp["fatal"] == "" and [a[0] for a in resp["answers"]] == ["grad"]


def test_a_vote_tag_stands_for_one_vote_only():
    """shm_and_words skips reading a peer whose tag equals this rank's: equal tags must mean
    equal votes. A vote of at most one ready slot, nothing stale and small flags has a tag of
    its own; any other vote has none (0: its words are read)."""
    rng, seen = random.Random(7), {}
    for capacity in (0, 1, 63, 64, 65, 1024, 1 << 20):
        for _ in range(300):
            ready = [] if capacity == 0 or rng.random() < 0.2 else [rng.randrange(capacity)]
            flags = rng.randrange(64)
            tag = wire.vote_tag(ready, (), flags, capacity)
            assert tag != 0, (ready, flags, capacity)
            key = (tuple(ready), flags)
            assert seen.setdefault((capacity, tag), key) == key, (capacity, tag, key)
        if capacity >= 2:
            a, b = rng.sample(range(capacity), 2)
            assert wire.vote_tag([a, b], (), 5, capacity) == 0
            assert wire.vote_tag([a], [b], 5, capacity) == 0
            assert wire.vote_tag([], [a], 5, capacity) == 0
        assert wire.vote_tag([], (), 1 << 31, capacity) == 0


def test_rank_0s_gather_offsets_are_summed_in_64_bits():
    """The gather's lengths come from the peers: their sum, kept in an int, wraps (2**31 - 1,
    2**31 - 1 and 2 add up to 0: a one-byte buffer for 4 GiB). Summed in 64 bits, a total past
    INT_MAX (MPI's int displacements) or a negative length is refused before any buffer is
    sized by it."""
    from hvlite._core.negotiation import exchange
    big = 2 ** 31 - 1
    assert exchange._gather_layout([3, 0, 5]) == (8, [0, 3, 3])
    assert exchange._gather_layout([]) == (0, [])
    assert exchange._gather_layout([big - 1])[0] == big - 1     # with the closing byte: INT_MAX
    for lens in ([big], [big, big, 2], [2 ** 30] * 2, [2 ** 30 - 1] * 3, [5, -1], [-2 ** 31]):
        assert exchange._gather_layout(lens)[0] is None, lens
