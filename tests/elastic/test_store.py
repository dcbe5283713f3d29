"""hvlite/elastic/store.py without MPI: atomic writes, the commits a rank keeps, the commit
format's checks (torn, corrupted, planted), the files' and directories' safety, and the rule
that picks the commit a relaunched job starts from."""
import errno
import os
import stat

import pytest

from hvlite.elastic import store
from hvlite.elastic.store import CommitError, CommitWarning, Store, agree


def framed(text, commit_id=1):
    return store.frame({"commit": commit_id}, text.encode())


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
        s.write(i, framed(f"commit {i}", i))
    assert s.commits() == [4, 5] and store.unframe(s.read(5), "c")[1] == b"commit 5"
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


# -- the commit format: a torn or corrupted commit is never offered ------------------------------

def test_a_torn_or_corrupted_commit_is_skipped_with_a_warning_naming_it(tmp_path):
    s = Store(str(tmp_path), 0)
    for i in (1, 2):
        s.write(i, framed("x" * 1000, i))
    whole = (tmp_path / "rank-0" / "commit-0000000002.pkl").read_bytes()
    assert s.intact_commits() == [1, 2]
    path = tmp_path / "rank-0" / "commit-0000000002.pkl"
    for cut, what in ((len(whole) // 2, "torn"), (len(whole) - 1, "torn"), (10, "header"),
                      (0, "empty"), (len(store.MAGIC) + 5, "header")):
        path.write_bytes(whole[:cut])
        with pytest.warns(CommitWarning, match=f"skipping commit 2: {path}: .*{what}"):
            assert s.intact_commits() == [1]
        with pytest.raises(CommitError, match=str(path)):
            s.read(2)
    flipped = bytearray(whole)
    flipped[-7] ^= 0x20
    path.write_bytes(bytes(flipped))
    with pytest.warns(CommitWarning, match="corrupted: the body's CRC-32"):
        assert s.intact_commits() == [1]
    path.write_bytes(whole + b"more")
    with pytest.warns(CommitWarning, match="corrupted: 1004 bytes"):
        assert s.intact_commits() == [1]
    path.write_bytes(b"\x80\x05K\x01.")               # a bare pickle: another format
    with pytest.warns(CommitWarning, match="not an hvlite commit"):
        assert s.intact_commits() == [1]
    path.write_bytes(whole)
    assert s.intact_commits() == [1, 2]


# -- files and directories: private, no symbolic links followed ------------------------------------

def test_files_are_private_and_a_symlink_at_the_final_name_is_replaced(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    s = Store(str(tmp_path / "d"), 0)
    assert stat.S_IMODE(os.stat(s.path).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "d").st_mode) == 0o700
    final = s.commit_path(1)
    os.symlink(victim, final)
    os.symlink(victim, os.path.join(s.path, "generation"))
    with pytest.warns(CommitWarning, match="symbolic link"):
        assert s.intact_commits() == []
    assert s.generation() is None                     # a link is not read either
    s.write(1, framed("mine"))
    s.set_generation(3)
    assert victim.read_text() == "precious"
    for name in (final, os.path.join(s.path, "generation")):
        st = os.lstat(name)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, name
    assert s.intact_commits() == [1] and s.generation() == 3


def test_a_symlink_at_the_temporary_name_is_never_opened(tmp_path, monkeypatch):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    target = tmp_path / "f"
    names = iter(["planted", "planted", "fresh"])
    monkeypatch.setattr(store, "_token", lambda: next(names))
    os.symlink(victim, tmp_path / ".f.planted.tmp")
    store.write_atomic(str(target), [b"new"])         # 'planted' twice, then a free name
    assert victim.read_text() == "precious" and target.read_bytes() == b"new"
    assert stat.S_IMODE(os.lstat(target).st_mode) == 0o600
    assert os.path.islink(tmp_path / ".f.planted.tmp")
    assert sorted(os.listdir(tmp_path)) == [".f.planted.tmp", "f", "victim"]
    monkeypatch.setattr(store, "_token", lambda: "planted")
    with pytest.raises(FileExistsError, match="no free temporary name"):
        store.write_atomic(str(target), [b"newer"])
    assert victim.read_text() == "precious" and target.read_bytes() == b"new"


def test_a_directory_of_another_user_is_refused(tmp_path, monkeypatch):
    (tmp_path / "d").mkdir()
    real = os.geteuid()
    monkeypatch.setattr(store.os, "geteuid", lambda: real + 1)
    with pytest.raises(store.UnsafeDirectoryError, match=f"{tmp_path / 'd'} belongs to user id "
                       f"{real}, not to this user"):
        Store(str(tmp_path / "d"), 0)
    monkeypatch.undo()
    (tmp_path / "file").write_text("")
    with pytest.raises(store.UnsafeDirectoryError, match="is not a directory"):
        Store(str(tmp_path / "file"), 0)
    Store(str(tmp_path / "d"), 0)


def test_a_directory_others_may_write_into_is_refused(tmp_path):
    """Another user who may write into the commit directory could plant commits: a rank's own
    directory must be writable by this user only and not a link; the directory the user names
    may be a group's (a team's scratch space) or a link, but not writable by everyone unless
    sticky."""
    top = tmp_path / "top"
    top.mkdir()
    Store(str(top), 0)
    for mode in (0o770, 0o707):
        os.chmod(top / "rank-0", mode)
        with pytest.raises(store.UnsafeDirectoryError, match=rf"rank-0 is writable by other "
                           rf"users \(mode 0{mode:o}\)"):
            Store(str(top), 0)
    os.chmod(top / "rank-0", 0o700)
    os.chmod(top, 0o777)
    with pytest.raises(store.UnsafeDirectoryError, match=r"top is writable by everyone"):
        Store(str(top), 0)
    for fine in (0o1777, 0o770):
        os.chmod(top, fine)
        Store(str(top), 0)
    os.chmod(top, 0o700)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    os.symlink(tmp_path / "elsewhere", top / "rank-1")
    with pytest.raises(store.UnsafeDirectoryError, match="rank-1 is a symbolic link"):
        Store(str(top), 1)
    os.symlink(top, tmp_path / "link")             # the named directory may be a link
    Store(str(tmp_path / "link"), 0)


def test_a_commit_file_of_another_user_is_skipped(tmp_path, monkeypatch):
    s = Store(str(tmp_path), 0)
    s.write(1, framed("state"))
    real = os.geteuid()
    monkeypatch.setattr(store.os, "geteuid", lambda: real + 1)
    with pytest.raises(store.UnsafeDirectoryError, match=f"commit-0000000001.pkl belongs to "
                       f"user id {real}, not to this user"):
        store.read_file(s.commit_path(1))
    monkeypatch.setattr(store, "private_dir", lambda path, own=False: path)
    with pytest.warns(store.CommitWarning, match="skipping commit 1: .* belongs to user id"):
        assert s.intact_commits() == []


def test_a_failed_directory_fsync_is_reported(tmp_path, monkeypatch):
    real = os.fsync

    def failing(code):
        def fsync(fd):
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                raise OSError(code, os.strerror(code))
            real(fd)
        return fsync
    monkeypatch.setattr(store.os, "fsync", failing(errno.EIO))
    with pytest.raises(OSError, match=f"fsync of the directory {tmp_path} failed"):
        store.write_atomic(str(tmp_path / "f"), [b"x"])
    monkeypatch.setattr(store.os, "fsync", failing(errno.EINVAL))
    with pytest.warns(CommitWarning, match=f"{tmp_path} cannot fsync a directory"):
        store.write_atomic(str(tmp_path / "f"), [b"y"])
    assert (tmp_path / "f").read_bytes() == b"y"


def test_set_aside_keeps_the_commits(tmp_path):
    s = Store(str(tmp_path), 1)
    for i in (3, 4):
        s.write(i, framed(f"c{i}", i))
    moved = s.set_aside(5)
    assert s.commits() == [] and [os.path.basename(p) for p in moved] == \
        ["commit-0000000003.pkl", "commit-0000000004.pkl"]
    assert all(os.path.dirname(p) == os.path.join(s.path, "set-aside-5") for p in moved)
    assert store.unframe(open(moved[1], "rb").read(), "c")[1] == b"c4"
    assert s.set_aside(6) == []
