"""Durable commits on disk: one directory per rank, files written so that a crash at any moment
leaves either the old commit or the new one, never half of one.

    <dir>/rank-<r>/commit-<id>.pkl     the committed state (pickle), newest two kept
    <dir>/rank-<r>/generation          the last launch this rank's directory took part in

Each rank writes its own copy (a temporary file, fsync, rename over, fsync of the directory),
so a commit needs no shared file system and no rank waits on another's disk. `agree()` is the
rule that picks the commit a relaunched job starts from; it is plain data in, data out, so it is
tested without MPI. This module uses the standard library only.
"""
import os
import re

KEEP = 2                    # commits kept per rank: agreement needs the newest two (see agree)
_COMMIT = re.compile(r"^commit-(\d+)\.pkl$")


def _fsync_dir(path):
    """Make a rename or unlink in `path` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path, chunks):
    """Write `chunks` (bytes-like, or a callable taking the open file) to `path`: a temporary
    file beside it, fsync, rename over `path`, fsync of the directory. A reader sees the old file
    or the whole new one."""
    tmp = f"{os.path.join(os.path.dirname(path), '.' + os.path.basename(path))}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            if callable(chunks):
                chunks(f)
            else:
                for chunk in chunks:
                    f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(os.path.dirname(path) or ".")


class Store:
    """One rank's commits under `directory`/rank-<rank>."""

    def __init__(self, directory, rank):
        self.root = directory
        self.path = os.path.join(directory, f"rank-{rank}")
        os.makedirs(self.path, exist_ok=True)

    def commit_path(self, commit_id):
        return os.path.join(self.path, f"commit-{commit_id:010d}.pkl")

    def commits(self):
        """The ids of the commits this rank holds, oldest first."""
        try:
            names = os.listdir(self.path)
        except OSError:
            return []
        return sorted(int(m.group(1)) for m in map(_COMMIT.match, names) if m)

    def write(self, commit_id, chunks):
        """Commit `commit_id` durably, then drop all but the newest KEEP commits."""
        write_atomic(self.commit_path(commit_id), chunks)
        held = self.commits()
        for old in held[:-KEEP]:
            self._remove(old)

    def read(self, commit_id):
        with open(self.commit_path(commit_id), "rb") as f:
            return f.read()

    def prune_after(self, commit_id):
        """Remove commits newer than `commit_id` (None: all): they belong to a timeline the job
        abandoned, and their ids are about to be reused."""
        for held in self.commits():
            if commit_id is None or held > commit_id:
                self._remove(held)

    def _remove(self, commit_id):
        """No fsync of its own: an old commit that reappears after a crash is still a commit,
        and sync() fsyncs the directory (the generation file) after pruning abandoned ones."""
        try:
            os.unlink(self.commit_path(commit_id))
        except OSError:
            pass

    def generation(self):
        """The launch this directory last took part in (None: never)."""
        try:
            with open(os.path.join(self.path, "generation")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def set_generation(self, generation):
        write_atomic(os.path.join(self.path, "generation"), [str(generation).encode()])


def agree(views):
    """The commit a relaunched job starts from, from every rank's view of its own directory:
    `views` is [(generation or None, [commit ids]), ...] in rank order.

    Returns (commit id or None, root rank or None, newest generation or None, survivor ranks).
    The survivors
    are the ranks whose directory took part in the newest launch (the highest generation); the
    commit is the newest one every survivor holds, and the root is the lowest rank holding it.
    A rank that is new, or whose directory is left from an older launch, takes no part: it gets
    the commit by broadcast.

    Why every survivor's and not the newest anywhere: `commit()` ends with a collective, so
    commit k returned on no rank before every rank had written it; a commit only some survivors
    hold was never finished. Why the newest two are kept: for the same reason no rank is more
    than one commit ahead of another, so the newest two of each survivor always overlap.
    """
    generations = [g for g, _ in views if g is not None]
    if not generations:
        return None, None, None, []
    newest = max(generations)
    survivors = [(r, set(ids)) for r, (g, ids) in enumerate(views) if g == newest]
    ranks = [r for r, _ in survivors]
    common = set.intersection(*(ids for _, ids in survivors))
    if not common:
        return None, None, newest, ranks
    chosen = max(common)
    return chosen, min(r for r, ids in survivors if chosen in ids), newest, ranks
