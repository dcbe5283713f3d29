"""hvlite/elastic/codec.py without MPI: what a commit may hold, read back without running code;
anything else refused (naming the file and the global) unless the state is trusted."""
import collections
import datetime
import os
import pickle

import numpy as np
import pytest

from hvlite.elastic import codec, store
from hvlite.elastic.store import CommitError


def round_trip(state, trusted=False):
    meta, back = codec.decode(b"".join(codec.encode({"commit": 7}, state, trusted)), trusted)
    assert meta["commit"] == 7
    return back


def test_plain_data_and_numpy_round_trip():
    state = {"params": {"w": np.arange(6.0).reshape(2, 3).T, "i": np.arange(4, dtype=np.int8),
                        "empty": np.zeros((0, 3)), "rec": np.zeros(2, [("a", "i4"), ("b", "f8")]),
                        "obj": np.array([1, "a", None], dtype=object)},
             "plain": [1, 2.5, "s", b"b", None, True, (1, 2), {1, 2}, frozenset([3]), 1 + 2j,
                       bytearray(b"z"), slice(1, 2), range(3), collections.OrderedDict(a=1)],
             "numpy": [np.float32(2), np.int64(-3), np.bool_(True), np.dtype("<u2"),
                       np.datetime64("2020-01-01")]}
    back = round_trip(state)
    for k, v in state["params"].items():
        assert np.array_equal(back["params"][k], v) and back["params"][k].dtype == v.dtype, k
    assert back["plain"] == state["plain"] and back["numpy"] == state["numpy"]
    assert type(back["plain"][-1]) is collections.OrderedDict


class Planted:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').close()",))


@pytest.mark.parametrize("how", ["exec", "os.system", "object array", "class"])
def test_a_planted_body_is_refused_naming_the_file_and_the_global(tmp_path, how):
    marker = tmp_path / "marker"
    payload = {"exec": Planted(str(marker)),
               "os.system": type("P", (), {"__reduce__": lambda self: (
                   os.system, (f"touch {marker}",))})(),
               "object array": np.array([Planted(str(marker))], dtype=object),
               "class": datetime.date(2020, 1, 1)}[how]
    global_name = {"exec": "builtins.exec", "os.system": f"{os.name}.system",
                   "object array": "builtins.exec", "class": "datetime.date"}[how]
    data = b"".join(store.frame({"commit": 3}, pickle.dumps({"objects": payload}, protocol=5)))
    source = str(tmp_path / "rank-0" / "commit-0000000003.pkl")
    with pytest.raises(CommitError, match=f"{source}: refused: .*global {global_name}"):
        codec.decode(data, source=source)
    assert not marker.exists()
    if how != "class":
        return
    assert codec.decode(data, trusted=True)[1]["objects"] == payload     # the opt-in


def test_the_writer_refuses_what_the_reader_would_and_says_where():
    with pytest.raises(CommitError, match=r"cannot commit a datetime.date at "
                       r"state\['objects'\]\['when'\]: .*trusted=True"):
        codec.dumps({"objects": {"when": datetime.date(2020, 1, 1)}})
    with pytest.raises(CommitError, match=r"the class collections.Counter at state\['k'\]\[1\]"):
        codec.dumps({"k": [1, collections.Counter]})
    with pytest.raises(CommitError, match="numpy.ma.MaskedArray"):
        codec.dumps({"m": np.ma.masked_array([1, 2])})
    assert round_trip({"when": datetime.date(2020, 1, 1)}, trusted=True) == \
        {"when": datetime.date(2020, 1, 1)}


def test_a_damaged_body_is_a_commit_error_not_a_crash():
    body = bytearray(codec.dumps({"w": np.arange(10.0)}))
    for cut in (len(body) // 2, 3, 1):
        data = b"".join(store.frame({}, bytes(body[:cut])))      # framed, so only the body
        with pytest.raises(CommitError, match="f: cannot read the commit"):
            codec.decode(data, source="f")
    record = pickle.dumps(None, protocol=5)
    unknown = record.replace(b"N", b"\x8c\x03abc\x94Q", 1)       # a persistent id nobody knows
    with pytest.raises(CommitError, match="nothing loaded here can read"):
        codec.loads(unknown, source="f")


def test_torch_tensors_are_raw_bytes_not_torch_pickles():
    torch = pytest.importorskip("torch")
    import hvlite.torch.elastic  # noqa: F401 - registers the tensor record
    tensors = {"f": torch.randn(3, 4).t(), "bf16": torch.tensor(3.5, dtype=torch.bfloat16),
               "empty": torch.zeros(0, 3), "bool": torch.ones(2, 2, dtype=torch.bool),
               "complex": torch.tensor([1 + 2j]), "param": torch.nn.Parameter(torch.ones(2))}
    body = bytes(codec.dumps(tensors))
    assert b"torch" not in body.replace(b"torch.Tensor", b"")
    back = round_trip(tensors)
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype and torch.equal(back[k], v.detach()), k
    with pytest.raises(CommitError, match="sparse_coo tensor"):
        codec.dumps({"s": torch.eye(2).to_sparse()})


def test_a_tensor_record_whose_bytes_do_not_fit_its_shape_is_refused(monkeypatch):
    """A damaged or planted record never loads as memory left over from elsewhere."""
    torch = pytest.importorskip("torch")
    import hvlite.torch.elastic  # noqa: F401 - registers the tensor record
    _, _, decode = codec._registry["torch.Tensor"]

    class Forged:
        def __init__(self, data):
            self.data = data

    monkeypatch.setitem(codec._registry, "torch.Tensor", (Forged, lambda f: f.data, decode))
    for raw in (np.empty(0, np.uint8), np.zeros(20, np.uint8), np.zeros(28, np.uint8)):
        body = codec.dumps({"w": Forged(("float32", [2, 3], raw))})
        with pytest.raises(CommitError, match=rf"f: cannot read .*{raw.size} bytes for a "
                           r"float32 tensor of shape \[2, 3\] \(24 bytes\)"):
            codec.loads(body, source="f")
    ok = codec.loads(codec.dumps({"w": Forged(("float32", [2, 0], np.empty(0, np.uint8)))}))
    assert ok["w"].shape == (2, 0) and ok["w"].dtype == torch.float32
