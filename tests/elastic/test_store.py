"""hvlite/elastic/store.py without MPI: atomic writes, the commits a rank keeps, and the rule
that picks the commit a relaunched job starts from."""
import os

import pytest

from hvlite.elastic import store
from hvlite.elastic.store import Store, agree


def test_write_atomic_replaces_whole_files_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "f"
    store.write_atomic(str(path), [b"old"])
    store.write_atomic(str(path), [b"ne", b"w"])
    assert path.read_bytes() == b"new"
    store.write_atomic(str(path), lambda f: f.write(b"streamed"))
    assert path.read_bytes() == b"streamed"
    assert os.listdir(tmp_path) == ["f"]


def test_a_failed_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "f"
    store.write_atomic(str(path), [b"old"])

    def boom(f):
        f.write(b"half")
        raise OSError("disk full")
    with pytest.raises(OSError, match="disk full"):
        store.write_atomic(str(path), boom)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["f"]


def test_a_rank_keeps_its_newest_two_commits(tmp_path):
    s = Store(str(tmp_path), 3)
    assert s.commits() == [] and s.generation() is None
    for i in range(1, 6):
        s.write(i, [f"commit {i}".encode()])
    assert s.commits() == [4, 5] and s.read(5) == b"commit 5"
    assert sorted(os.listdir(tmp_path / "rank-3")) == ["commit-0000000004.pkl",
                                                       "commit-0000000005.pkl"]
    s.set_generation(7)
    assert s.generation() == 7
    s.prune_after(4)
    assert s.commits() == [4]
    s.prune_after(None)
    assert s.commits() == []
    (tmp_path / "rank-3" / "generation").write_text("garbage")
    assert s.generation() is None


def test_agree_first_launch_and_survivors():
    # nobody has ever run: no commit, rank 0's state is broadcast
    assert agree([(None, []), (None, [])]) == (None, None, None, [])
    # all survived: the newest commit all hold
    assert agree([(1, [4, 5]), (1, [4, 5]), (1, [4, 5])]) == (5, 0, 1, [0, 1, 2])
    # rank 0 wrote commit 6 and died before the commit's collective: 6 was never finished
    assert agree([(1, [5, 6]), (1, [4, 5])]) == (5, 0, 1, [0, 1])
    # a new rank (no directory) and one left from an older launch take no part ...
    assert agree([(2, [8, 9]), (None, []), (1, [4, 5]), (2, [8, 9])]) == (9, 0, 2, [0, 3])
    # ... even when its ids overlap with the survivors': ids are reused after a rollback
    assert agree([(None, []), (1, [9]), (2, [8, 9])]) == (9, 2, 2, [2])
    # the root is the lowest survivor holding the commit
    assert agree([(2, [2]), (2, [2, 3]), (2, [2, 3]), (1, [3])])[:2] == (2, 0)
    # survivors with nothing in common (one never committed in its launch): start over
    assert agree([(1, [1]), (1, [])]) == (None, None, 1, [0, 1])


def test_agree_can_fail():
    """The rule is not 'newest anywhere': a commit only some survivors hold is not chosen."""
    chosen, _, _, _ = agree([(3, [10, 11]), (3, [10])])
    assert chosen == 10 != 11
