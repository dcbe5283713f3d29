"""Durable commits on disk: one directory per rank, files written so that a crash at any moment
leaves either the old commit or the new one, never half of one, and a file that was damaged
anyway (a torn write on a file system that reordered it, a copy cut short) is recognized.

    <dir>/rank-<r>/commit-<id>.pkl     a commit (format below), newest two kept
    <dir>/rank-<r>/generation          the last launch this rank's directory took part in
    <dir>/rank-<r>/set-aside-<g>/      commits launch <g> did not use (no commit was common to
                                       the survivors): kept for the user, never read again

A commit file is a header and a body: the line `hvlite-commit 1`, one line of JSON (the commit's
metadata, the body's length in bytes and its CRC-32), then the body (hvlite/elastic/codec.py
says what it holds). `unframe` checks the length and the checksum before anything reads the
body, so a torn or corrupted commit is skipped (with a warning naming the file), never offered to
`agree()`. The checksum finds damage, not tampering (anyone who can write the file can compute
it): what keeps a planted commit from running code is codec.py's restricted reader.

Each rank writes its own copy: a temporary file beside the target, created with
O_CREAT|O_EXCL|O_NOFOLLOW under a random name and mode 0600, fsync, rename over the target (a
rename replaces a symbolic link planted there instead of following it), fsync of the directory,
whose failure is reported. Directories are made with mode 0700, and one that belongs to another
user is refused. A commit needs no shared file system and no rank waits on another's disk.
`agree()` is the rule that picks the commit a relaunched job starts from; it is plain data in,
data out, so it is tested without MPI. This module uses the standard library only (and
hvlite.errors).
"""
import errno
import json
import os
import re
import secrets
import stat
import warnings
import zlib

from hvlite.errors import HvliteError

KEEP = 2                    # commits kept per rank: agreement needs the newest two (see agree)
_COMMIT = re.compile(r"^commit-(\d+)\.pkl$")
MAGIC = b"hvlite-commit 1\n"
MAX_HEADER = 4096           # bytes of JSON a header may hold
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class CommitError(HvliteError, ValueError):
    """An elastic commit that cannot be used: a file that is not a whole commit (torn,
    corrupted, another format), a commit that needs objects outside the allow-list of
    hvlite/elastic/codec.py without trusted=True, or a commit that failed on some rank."""


class UnsafeDirectoryError(HvliteError, PermissionError):
    """A commit directory that is not this user's own (or is not a directory)."""


class CommitWarning(UserWarning):
    """A commit skipped (torn, corrupted) or set aside, or a directory fsync not available."""


def _warn(message):
    warnings.warn(f"hvlite.elastic: {message}", CommitWarning, stacklevel=3)


# -- files and directories ------------------------------------------------------------------------

def private_dir(path, own=False):
    """Make the directory `path` (mode 0700 where it is made) and check that it is a directory
    of this user: a commit directory another user owns, or may write into, could hold commits
    they planted. A directory the user names may be a symbolic link and writable by a group
    (a team's scratch space), not by everyone unless sticky; one hvlite makes for itself
    (`own`: a rank's commits, a set-aside generation) must be neither a link nor writable by
    anyone else."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except FileExistsError:
        pass                                    # not a directory: said below
    st = os.lstat(path) if own else os.stat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeDirectoryError(errno.ELOOP, f"the commit directory {path} is a symbolic "
                                   "link: refusing to read or write commits through it")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeDirectoryError(errno.ENOTDIR, f"the commit directory {path} is not a "
                                   "directory")
    if st.st_uid != os.geteuid():
        raise UnsafeDirectoryError(
            errno.EPERM, f"the commit directory {path} belongs to user id {st.st_uid}, not to "
            f"this user ({os.geteuid()}): refusing to read or write commits there; use a "
            "directory of your own")
    if st.st_mode & (0o022 if own else 0o002) and not (st.st_mode & stat.S_ISVTX and not own):
        raise UnsafeDirectoryError(
            errno.EPERM, f"the commit directory {path} is writable by "
            f"{'other users' if own else 'everyone'} (mode {stat.S_IMODE(st.st_mode):04o}): "
            f"refusing to read or write commits there; chmod go-w it")
    return path


_NO_DIR_FSYNC = set()


def fsync_dir(path):
    """Make a rename or unlink in `path` durable. A failure is raised, naming the directory; a
    file system that cannot fsync a directory at all (EINVAL) is warned about once."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
    except OSError as e:
        raise OSError(e.errno, f"cannot open the directory {path} to make a rename in it "
                               f"durable: {e.strerror}") from None
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise OSError(e.errno, f"fsync of the directory {path} failed ({e.strerror}): a "
                                   "rename in it may not survive a crash") from None
        if path not in _NO_DIR_FSYNC:
            _NO_DIR_FSYNC.add(path)
            _warn(f"the file system of {path} cannot fsync a directory ({e.strerror}): a commit "
                  "renamed into it may not survive a machine crash")
    finally:
        os.close(fd)


def _token():
    return secrets.token_hex(8)


def _create_private(directory, base):
    """A new file `directory/.base.<random>.tmp` (O_EXCL|O_NOFOLLOW, mode 0600): (fd, path). A
    name already taken, by a symbolic link or anything else, is never opened: another is drawn."""
    for _ in range(100):
        tmp = os.path.join(directory, f".{base}.{_token()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
        except FileExistsError:
            continue
        return fd, tmp
    raise FileExistsError(errno.EEXIST, f"no free temporary name for {base} in {directory}")


def write_atomic(path, chunks):
    """Write `chunks` (bytes-like, or a callable taking the open file) to `path`, mode 0600: a
    temporary file beside it (see _create_private), fsync, rename over `path`, fsync of the
    directory. A reader sees the old file or the whole new one."""
    directory = os.path.dirname(path) or "."
    fd, tmp = _create_private(directory, os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as f:
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
    fsync_dir(directory)


def read_file(path):
    """The bytes of `path`, which must be a regular file (a symbolic link is refused)."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise OSError(e.errno, f"{path} is a symbolic link, not a commit") from None
        raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"{path} is not a regular file")
        if st.st_uid != os.geteuid():       # planted by another user
            raise UnsafeDirectoryError(errno.EPERM, f"{path} belongs to user id {st.st_uid}, "
                                       f"not to this user ({os.geteuid()}): not read")
        return f.read()


# -- the commit format ----------------------------------------------------------------------------

def frame(meta, body):
    """A commit file's chunks: the header (`meta` plus the body's length and CRC-32), then the
    body (bytes-like)."""
    head = dict(meta, length=len(body), crc32=zlib.crc32(body))
    line = json.dumps(head, sort_keys=True).encode()
    if len(line) > MAX_HEADER:
        raise ValueError(f"commit metadata of {len(line)} bytes: at most {MAX_HEADER}")
    return [MAGIC, line + b"\n", body]


def unframe(data, source):
    """(metadata, body) of a commit file's bytes, after checking that the body is whole: raises
    CommitError naming `source` for a file that is torn, corrupted or not a commit."""
    if not data.startswith(MAGIC):
        what = "an empty file" if not data else (
            "torn inside its header" if MAGIC.startswith(data) else
            "not an hvlite commit (no 'hvlite-commit 1' header: written by another version, or "
            "not by hvlite)")
        raise CommitError(f"{source}: {what}")
    end = data.find(b"\n", len(MAGIC), len(MAGIC) + MAX_HEADER + 1)
    if end < 0:
        raise CommitError(f"{source}: torn inside its header")
    try:
        head = json.loads(data[len(MAGIC):end])
        length, crc = int(head["length"]), int(head["crc32"])
    except (ValueError, TypeError, KeyError):
        raise CommitError(f"{source}: corrupted header") from None
    body = memoryview(data)[end + 1:]
    if len(body) != length:
        raise CommitError(f"{source}: torn: {len(body)} of the {length} bytes its header "
                          f"announces" if len(body) < length else
                          f"{source}: corrupted: {len(body)} bytes after the header, which "
                          f"announces {length}")
    if zlib.crc32(body) != crc:
        raise CommitError(f"{source}: corrupted: the body's CRC-32 is not the header's")
    return head, body


class Store:
    """One rank's commits under `directory`/rank-<rank>."""

    def __init__(self, directory, rank):
        self.root = directory
        self.path = os.path.join(directory, f"rank-{rank}")
        private_dir(directory)
        private_dir(self.path, own=True)

    def commit_path(self, commit_id):
        return os.path.join(self.path, f"commit-{commit_id:010d}.pkl")

    def commits(self):
        """The ids of the commit files this rank holds, oldest first (whole or not)."""
        try:
            names = os.listdir(self.path)
        except OSError:
            return []
        return sorted(int(m.group(1)) for m in map(_COMMIT.match, names) if m)

    def intact_commits(self):
        """The ids of the commits whose files are whole (header, length, checksum), oldest
        first; each other one is skipped with a CommitWarning naming its file."""
        out = []
        for commit_id in self.commits():
            try:
                self.read(commit_id)
            except (OSError, CommitError) as e:
                _warn(f"skipping commit {commit_id}: {e}")
                continue
            out.append(commit_id)
        return out

    def write(self, commit_id, chunks):
        """Commit `commit_id` durably, then drop all but the newest KEEP commits."""
        write_atomic(self.commit_path(commit_id), chunks)
        held = self.commits()
        for old in held[:-KEEP]:
            self._remove(old)

    def read(self, commit_id):
        """The whole file of commit `commit_id`, checked (see unframe): raises CommitError or
        OSError naming the file otherwise."""
        path = self.commit_path(commit_id)
        data = read_file(path)
        unframe(data, path)
        return data

    def prune_after(self, commit_id):
        """Remove commits newer than `commit_id` (None: all): they belong to a timeline the job
        abandoned, and their ids are about to be reused."""
        for held in self.commits():
            if commit_id is None or held > commit_id:
                self._remove(held)

    def set_aside(self, generation):
        """Move every commit file into set-aside-<generation>/ (never read again, kept for the
        user): [new paths]."""
        held = self.commits()
        if not held:
            return []
        dest = private_dir(os.path.join(self.path, f"set-aside-{generation}"), own=True)
        moved = []
        for commit_id in held:
            src = self.commit_path(commit_id)
            target = os.path.join(dest, os.path.basename(src))
            os.replace(src, target)
            moved.append(target)
        fsync_dir(dest)
        fsync_dir(self.path)
        return moved

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
            return int(read_file(os.path.join(self.path, "generation")).decode().strip())
        except (OSError, ValueError):
            return None

    def set_generation(self, generation):
        write_atomic(os.path.join(self.path, "generation"), [str(generation).encode()])


def agree(views):
    """The commit a relaunched job starts from, from every rank's view of its own directory:
    `views` is [(generation or None, [intact commit ids]), ...] in rank order.

    Returns (commit id or None, root rank or None, newest generation or None, survivor ranks).
    The survivors
    are the ranks whose directory took part in the newest launch (the highest generation); the
    commit is the newest one every survivor holds, and the root is the lowest rank holding it.
    A rank that is new, or whose directory is left from an older launch, takes no part: it gets
    the commit by broadcast.

    Why every survivor's and not the newest anywhere: `commit()` ends with a collective, so
    commit k returned on no rank before every rank had written it; a commit only some survivors
    hold was never finished. Why the newest two are kept: for the same reason no rank is more
    than one commit ahead of another, so the newest two of each survivor always overlap (unless
    one of them was damaged on disk: then the survivors may share none).
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
