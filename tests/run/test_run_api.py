"""hvlite.run.run(): Horovod's horovod.run, a function run on N ranks from a plain process."""
import pytest

import hvlite.run
from run_funcs import fails_on_rank_1, ranked_sum


def test_every_rank_runs_the_function_and_returns_in_rank_order():
    got = hvlite.run.run(ranked_sum, args=(10,), kwargs={"offset": 1}, np=3, timeout=120)
    total = float(sum(r * 10 + 1 for r in range(3)))
    assert got == [(r, 3, total) for r in range(3)], got


def test_a_failing_rank_raises_with_its_error():
    with pytest.raises(hvlite.run.RunError) as info:
        hvlite.run.run(fails_on_rank_1, np=2, timeout=120)
    assert "rank 1 fails on purpose" in str(info.value), info.value


def test_arguments_are_checked():
    with pytest.raises(TypeError):
        hvlite.run.run(42, np=2)
    with pytest.raises(ValueError):
        hvlite.run.run(ranked_sum, np=0)


def test_a_rank_loads_no_payload_from_a_directory_it_cannot_trust(tmp_path, monkeypatch):
    """On a host without the caller's /tmp, another user could make the directory named on the
    rank's command line and plant a payload there: the rank refuses to unpickle it."""
    import os
    import pickle

    from hvlite.run import func
    work = tmp_path / "call"
    work.mkdir(mode=0o700)
    (work / "payload.pkl").write_bytes(pickle.dumps((max, (1, 2), {})))
    monkeypatch.setattr(func, "_rank", lambda: 0)
    func.main(str(work))                        # the caller's own: runs
    assert pickle.loads((work / "result.0").read_bytes()) == 2
    os.chmod(work, 0o777)
    with pytest.raises(SystemExit, match="not the call's private directory .* mode 0777"):
        func.main(str(work))
    os.chmod(work, 0o700)
    real = os.geteuid()
    monkeypatch.setattr(func.os, "geteuid", lambda: real + 1)
    with pytest.raises(SystemExit, match=f"found mode 0700, user {real}"):
        func.main(str(work))
    monkeypatch.undo()
    monkeypatch.setattr(func, "_rank", lambda: 0)
    os.symlink(work, tmp_path / "link")
    with pytest.raises(SystemExit, match="not the call's private directory"):
        func.main(str(tmp_path / "link"))
    (work / "payload.pkl").unlink()
    os.symlink(tmp_path / "elsewhere.pkl", work / "payload.pkl")
    with pytest.raises(OSError):
        func.main(str(work))
