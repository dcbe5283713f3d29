"""One thread per process set that runs device collectives, in the order this rank submitted them.

Each device collective first sends a small ticket through the coordinator, under the
collective's own name: the table of what the collective is on each rank (its place in this
rank's device order, name, kind, dtype, op, root, size). An all-reduce's ticket is itself an
all-reduce (Max over a table where each rank fills its own row), so that it runs while ranks
have joined, as host all-reduces do: a joined rank contributes the identity, its row stays
empty and is skipped. The other collectives' tickets are allgathers, which fail while a rank
has joined, as those collectives must. The worker waits for its ticket before moving any data, so
ranks that submitted device collectives in different orders, or with different arguments, all
get the same clear error naming the ranks instead of a hang; and a rank that passed a host
array under that name (a CPU/GPU mix) meets the ticket in the host negotiation, which fails both
sides as a mismatch. The ticket is sent at submit, so it overlaps the previous collective's data
movement.
"""
import collections
import queue
import threading
import zlib

import numpy as np

from hvlite.errors import InvalidArgumentError, MismatchError
from hvlite.gpu import cuda_aware
from hvlite.work import Work

FIELDS = ("name", "kind", "dtype", "op", "root", "bytes", "rejected", "order")
REJECTED = FIELDS.index("rejected")
EMPTY = np.iinfo(np.int64).min      # Max's identity: the row of a rank that has joined


def ticket_record(name, kind, dtype_code, op, root, nbytes, rejected, order):
    return np.array([zlib.crc32(name.encode()), kind, dtype_code, op, root, nbytes,
                     int(rejected), order], np.int64)


def ticket_table(record, position, n):
    """An all-reduce ticket's input: `record` in this rank's row, Max's identity elsewhere."""
    table = np.full((n, len(FIELDS)), EMPTY, np.int64)
    table[position] = record
    return table.reshape(-1)


def check_tickets(table, name, ranks, what):
    """Raise (identically on every rank: all see the same table) if the ranks disagree. Rows
    left empty (ranks that had joined, which contribute nothing) are not compared. Returns
    whether every rank filled its row (none had joined)."""
    table = np.asarray(table).reshape(len(ranks), len(FIELDS))
    here = table[:, 0] != EMPTY          # a name's crc is never negative
    everyone = bool(here.all())
    ranks, table = [q for q, h in zip(ranks, here) if h], table[here]
    bad = [ranks[i] for i in range(len(ranks)) if table[i, REJECTED]]
    if bad:
        raise InvalidArgumentError(f"{what} {name!r}: rank(s) {bad} rejected their arguments "
                                   "(see the error on those ranks)")
    if table.shape[0] and not (table == table[0]).all():
        diff = [FIELDS[j] for j in range(len(FIELDS)) if not (table[:, j] == table[0, j]).all()]
        odd = [ranks[i] for i in range(len(ranks)) if not (table[i] == table[0]).all()]
        raise MismatchError(
            f"{what} {name!r}: the ranks' device collectives disagree in {', '.join(diff)} "
            f"(ranks {odd} differ from rank {ranks[0]}); device collectives must be submitted "
            "in the same order, with the same arguments, on every rank")
    return everyone


class DeviceHandle(Work):
    """A device collective in flight; synchronize() returns its result on the device, ordered
    before later work on the caller's current stream (a stream wait, no host block). The job
    on the worker's queue holds the arrays until it has run, so dropping the handle is safe."""

    __slots__ = ("_event", "_result", "_failure", "_finish", "name")

    def __init__(self, name, finish):
        super().__init__()
        self._event = threading.Event()
        self._result = self._failure = None
        self._finish, self.name = finish, name

    def _ready(self):
        return self._event.is_set()

    def _block(self):
        self._event.wait()

    def _collect(self):
        if self._failure is not None:
            raise self._failure
        return self._finish(self._result) if self._finish is not None else self._result

    def _release(self):
        self._result = self._failure = self._finish = None

    def _done(self, result=None, error=None):
        self._result, self._failure = result, error
        self._event.set()


class DeviceWorker:
    def __init__(self, set_id):
        self.queue = queue.Queue()
        self.count = 0                 # device collectives submitted on this set (their order)
        self.lock = threading.Lock()
        self.queue_lock = threading.RLock()    # submit(): order, ticket and queue together
        self.slots = {}                # engine -> ([pinned staging slots], [freed events])
        self.held = collections.deque()     # (engine, event, buffers): kept until the event
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name=f"hvlite-gpu-{set_id}")
        self.thread.start()

    def next_order(self):
        with self.lock:
            self.count += 1
            return self.count

    def ticket_table(self, ticket):
        """The ticket's table. A ticket that failed in the host negotiation (another rank
        passed a host array under its name) formed no table: the ranks that counted it stop
        counting it, so their order agrees again with the ranks that never did (device calls
        submitted before this ran carry the old count: they fail on every rank alike)."""
        try:
            return ticket.synchronize()
        except BaseException:
            with self.lock:
                self.count -= 1
            raise

    def staging_slots(self, engine, chunk):
        """The pinned slots of the staging pipeline and, per slot, the event of the copy that
        last read it (staging.run_chunked updates it): the next job's copies into a slot wait
        for it, since the host never did."""
        got = self.slots.get(id(engine))
        if got is None or len(got[0][0]) < chunk:
            if got is not None:             # replaced: its copies must be done before it goes
                for ev in got[1]:
                    if ev is not None:
                        engine.sync(ev)
            got = self.slots[id(engine)] = ([engine.pinned(chunk), engine.pinned(chunk)],
                                            [None, None])
        return got

    def hold(self, engine, event, *buffers):
        """Keep host buffers an asynchronous copy reads until its event: a pinned pool hands a
        freed block out again at once, whatever is still copying from it. (From the caller's
        thread at synchronize(), and the worker's.)"""
        with self.lock:
            self.held.append((engine, event, buffers))
        self.reap()

    def reap(self):
        """Let go of the held buffers whose copies are done (oldest first)."""
        with self.lock:
            while self.held and self.held[0][0].query(self.held[0][1]):
                self.held.popleft()

    def _let_go(self):
        """At stop: wait for the copies still reading held buffers, then drop them all."""
        with self.lock:
            held, self.held = list(self.held), collections.deque()
        for engine, event, _ in held:
            try:
                engine.sync(event)
            except Exception:      # noqa: BLE001 - a device gone at exit: nothing left to protect
                pass

    def submit(self, handle, job):
        self.queue.put((handle, job))

    def drain(self):
        """Wait until every device collective this rank queued has run (before a join)."""
        done = DeviceHandle("drain", None)
        self.submit(done, lambda: None)
        done.wait()

    def _run(self):
        while True:
            handle, job = self.queue.get()
            if job is None:
                self._let_go()
                return
            try:
                handle._done(job())
            except BaseException as e:        # every failure reaches the caller's synchronize
                handle._done(error=e)

    def stop(self):
        self.queue.put((None, None))


def direct_comm(rt):
    """The communicator device memory goes to MPI on, with a CUDA-aware MPI: a collective Dup
    of the job's, made once, at this rank's first such call or its first join."""
    comm = getattr(rt, "_gpu_comm", None)
    if comm is None:
        comm = rt._gpu_comm = rt.comm.Dup()
    return comm


def before_join(rt):
    """join() on every rank, before the host join: the communicator above is made now if it is
    ever to be, since a rank that has joined would not be there for the others' first call."""
    if cuda_aware.decide(rt.settings.cuda_aware)[0]:
        direct_comm(rt)


def agree_order(st, allreduce_max):
    """After a join: the device collectives that ran while a rank had joined were not counted
    there, so every rank takes the highest count (`allreduce_max`: an int64 array in place,
    a collective of the set) and device orders agree again."""
    w = getattr(st, "_gpu_worker", None)
    count = np.array([w.count if w is not None else 0], np.int64)
    allreduce_max(count)
    if count[0]:
        w = worker_of(st)
        with w.lock:
            w.count = int(count[0])


def worker_of(st):
    w = getattr(st, "_gpu_worker", None)
    if w is None:
        w = st._gpu_worker = DeviceWorker(st.id)
    return w
