"""Decides which concurrent writes share one transaction: submits that arrive while another is
being written wait, and the next of them writes all that waited in one transaction and one commit.

A job's insert touches a dozen pages (the jobs table and its indexes, its config, its tasks), and
the commit writes each to the WAL: on this 2-core host the commit alone cost about 600 µs of a
submit's 900 µs, so a controller answering several clients spent most of its submit time writing
the same index pages over and over. Writing the jobs that wait together writes each page once per
group, and the begin, the lock hand-over and the commit are paid once per group too.

The shape is leader and followers, with no thread of its own: a caller queues its work; if no
group is being written it becomes the leader, takes the write lock, takes everything queued by
then, runs each item inside its own savepoint and commits; the others sleep until the group that
holds their item has committed. So an item's caller returns only once its rows are durable (as
durable as the database's own commit: in the WAL, surviving a crash of the process), and an item
whose work raises has its writes undone and its error raised to its own caller alone, while the
rest of its group commits. A commit that fails (a full disk) fails every item of the group, none
of whose writes were kept. A lone caller on an idle controller leads a group of one at once: it
never waits for company.

Callers may announce themselves before their work is ready (`announced`: the API front announces
a LaunchJob as soon as its body has come whole, before it is decoded and validated; not when its
head arrives, or one connection sending a body slowly, or never finishing it, held every group
for `max_wait_s`). A leader that knows of announced callers not yet queued waits for them, up to
`max_wait_s`, so that they share its commit: with four clients submitting back to back the
groups otherwise stayed at about 1.3 submits, because each next request was still being read and
validated while the last group committed, and a commit of one job's pages cost about 60 % of its
insert. Nothing announced, nothing waited for: a lone submit still commits at once.

A caller on the event loop (`run_async`) has no thread to lead from and must not block the loop:
its item is queued, and if no group is being written a drain is handed to the one writer thread
this object owns, which writes groups until the queue is empty; the caller awaits a future that
the writer hands back once the item's group has committed, for all of a group's async items with
one wake-up of the loop (`_LoopWaker`). So the API answers a plain submit without a worker thread of its own: on this
2-core host the hop to a thread and back (an executor hand-off, then a threadsafe call back into
the loop, each a system call made holding the GIL) cost more of the API's time per submit than
validating the request, and with several clients it is paid once per group instead of once per job.
A thread caller that leads (`run`) stops once its own item is written; any async items still
queued then are handed to the writer thread, so no item waits without a leader.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.exc import OperationalError

from iris.controller.db.database import Database, is_disk_full, rows_written, savepoint, transaction_open
from iris.core import spans

log = logging.getLogger(__name__)


class _Item:
    __slots__ = ("work", "done", "value", "error", "future", "waker")

    def __init__(
        self, work: Callable[[Connection], Any], future: asyncio.Future | None = None, waker: _LoopWaker | None = None
    ):
        self.work = work
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None
        self.future = future  # an async caller's, settled on its loop (through `waker`) once the item is done
        self.waker = waker


class _LoopWaker:
    """Hands finished items back to one event loop, which settles their futures: the writer queues
    them and writes a byte to a pipe the loop watches.

    A pipe and not `loop.call_soon_threadsafe`: `os.write` lets go of the GIL for its system call,
    and uvloop's wake-up holds it. On this 2-core host the loop it woke often ran at once and then
    waited for the GIL the writer still held, so with 4 clients submitting the writer's hand-back of
    its groups was about a fifth of the controller's GIL time (py-spy --gil); the pipe's is noise.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._ready: deque[_Item] = deque()
        loop.add_reader(self._read, self._on_readable)
        weakref.finalize(self, _close_pipe, self._read, self._write)  # with its loop, once that is gone

    def wake(self, items: list[_Item]) -> None:
        """(Any thread.) Queues `items` for the loop and wakes it."""
        self._ready.extend(items)
        try:
            os.write(self._write, b"\0")
        except BlockingIOError:  # the pipe is full: the loop has wake-ups pending already
            pass
        except OSError:  # closed with its loop: nobody awaits these any longer
            pass

    def _on_readable(self) -> None:
        try:
            while os.read(self._read, 4096):
                pass
        except BlockingIOError:
            pass
        while self._ready:
            _settle(self._ready.popleft())


def _close_pipe(*fds: int) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class _Writer:
    """The thread that writes groups for callers on an event loop: it sleeps in a read of a pipe,
    and each byte written to the pipe (`hand_off`) has it drain the queue once.

    A pipe and not a queue or a condition: waking a sleeping thread is a system call, and
    `os.write` lets go of the interpreter lock for it where a lock's release holds it. The API's
    event loop hands off the queue about once per submit group; holding the lock through the
    wake-up (which the woken thread often answers at once, taking the core) was a few per cent of
    the controller's lock time with 4 clients submitting.
    """

    _DRAIN, _STOP = b"d", b"s"

    def __init__(self, drain: Callable[[], None]):
        self._read, self._write = os.pipe()
        self._thread = threading.Thread(target=self._run, args=(drain,), name="iris-submit-writer", daemon=True)
        self._thread.start()

    def hand_off(self) -> None:
        """(Any thread.) Has the thread drain the queue once, after what it was handed before."""
        os.write(self._write, self._DRAIN)

    def stop(self) -> None:
        """Stops the thread once it has drained for every hand-off before this; waits for that."""
        os.write(self._write, self._STOP)
        self._thread.join()
        _close_pipe(self._read, self._write)

    def _run(self, drain: Callable[[], None]) -> None:
        while os.read(self._read, 1) == self._DRAIN:
            try:
                drain()
            except Exception:  # the thread must go on for the hand-offs after this one
                log.exception("writing a submit group failed")


class _WriteAgain(Exception):
    """An item of a group raised after writing rows: the group's transaction is rolled back."""


class Announcement:
    """One caller's word that its work is coming (see `GroupCommit.announced`)."""

    __slots__ = ("pending",)

    def __init__(self, pending: bool = True) -> None:
        self.pending = pending  # until its work is queued, or its caller gives up


# The announcement of the request being served, set by the API front for the handler it calls
# (the handler's thread sees the request's context); None outside a LaunchJob call.
current_announcement: ContextVar[Announcement | None] = ContextVar("current_announcement", default=None)


class GroupCommit:
    """Runs write work in shared transactions; `run` returns once the work's transaction committed."""

    def __init__(self, db: Database, max_group: int = 64, max_wait_s: float = 0.002):
        self.db = db
        self.max_group = max_group  # bounds how long one transaction holds the write lock
        self.max_wait_s = max_wait_s  # the longest a leader waits for announced callers
        self._expected = 0  # announced callers whose work is not queued yet
        self._queue: list[_Item] = []
        self._cond = threading.Condition()
        self._leading = False
        self._writer: _Writer | None = None  # drains the queue for async callers
        self._closed = False
        # The groups' connection, kept open between them (only the one leader uses it at a time):
        # taking one from the pool and giving it back cost about a fifth of the writer's time.
        self._conn: Connection | None = None
        self._wakers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopWaker] = weakref.WeakKeyDictionary()
        self.groups = 0  # committed (or failed) groups, for tests and figures
        self.items = 0  # items in them

    @contextmanager
    def announced(self, note: Announcement | None = None) -> Iterator[Announcement]:
        """Tells leaders that this caller's work is coming, until it is queued (pass the
        announcement to `run`) or the block ends without it (a refused request). `note`: one the
        caller made already (the API front's, as the request arrived), settled the same way."""
        if note is None:
            note = Announcement()
            with self._cond:
                self._expected += 1
        try:
            yield note
        finally:
            self.settle(note)

    def announce(self, note: Announcement) -> None:
        """Counts `note`, made not pending and handed to `announced`, as announced from now (a
        request whose body has come whole); at most once, before its block ends."""
        with self._cond:
            if not note.pending:
                note.pending = True
                self._expected += 1

    def settle(self, note: Announcement) -> None:
        """Withdraws `note` if its work was never queued (its caller answered without an insert)."""
        if not note.pending:
            # Queued (or withdrawn) already: `pending` never turns true again, so this needs no
            # lock, which the writer may hold; a submit passes here twice after its work is queued.
            return
        with self._cond:
            if note.pending:
                note.pending = False
                self._expected -= 1
                self._wake_leader()

    def _enqueue(self, item: _Item, note: Announcement | None) -> None:
        """Queues `item` in place of its caller's announcement (the caller holds the condition)."""
        self._queue.append(item)
        if note is not None and note.pending:
            note.pending = False
            self._expected -= 1
        self._wake_leader()

    def _wake_leader(self) -> None:
        """(Holding `_cond`.) Wakes a leader waiting for company (`_await_announced`) once it has
        no more reason to wait: nothing announced is still to come, or its group is full. Not
        before: a wake-up is a system call made holding the interpreter lock, and the woken leader
        would only look and sleep again, once for each submit of a burst."""
        if self._expected <= 0 or len(self._queue) >= self.max_group:
            self._cond.notify_all()

    def run(self, work: Callable[[Connection], Any], note: Announcement | None = None) -> Any:
        """Runs `work(conn)` inside a write transaction, maybe shared with other callers' work;
        returns its value once that transaction has committed, or raises its error (its writes
        undone) or the commit's. `note`: this caller's announcement, if it made one."""
        item = _Item(work)
        with self._cond:
            self._enqueue(item, note)
            while not item.done and self._leading:
                self._cond.wait()
            if item.done:
                return _outcome(item)
            self._leading = True
            self._await_announced()
        try:
            self._write_groups_until(item)
        finally:
            with self._cond:
                self._leading = False
                self._lead_for_async()
                self._cond.notify_all()
        return _outcome(item)

    async def run_async(self, work: Callable[[Connection], Any], note: Announcement | None = None) -> Any:
        """`run` for a caller on an event loop: the work is written on the writer thread (maybe in
        a group with others) and this returns its value, or raises its error, once that group's
        transaction has committed. The loop is never blocked: not by the write lock, not by the
        commit. A caller cancelled meanwhile leaves its work to be written all the same."""
        loop = asyncio.get_running_loop()
        waker = self._wakers.get(loop)
        if waker is None:
            waker = self._wakers[loop] = _LoopWaker(loop)
        item = _Item(work, loop.create_future(), waker)
        with self._cond:
            self._enqueue(item, note)
            self._lead_for_async()
        assert item.future is not None
        return await item.future

    def close(self) -> None:
        """Stops the writer thread once the groups queued to it are written."""
        with self._cond:
            writer, self._writer, self._closed = self._writer, None, True  # stopped once, however often closed
        if writer is not None:
            writer.stop()
        self._drop_connection()

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # a broken connection: the pool discards it
                log.warning("closing the submit groups' database connection failed", exc_info=True)

    def _lead_for_async(self) -> None:
        """(Holding `_cond`.) Hands the queue to the writer thread when it holds async items and no
        group is being written: their callers cannot lead."""
        if self._leading or not any(item.future is not None for item in self._queue):
            return
        if self._closed:
            raise RuntimeError("the controller is stopping: no more submits are written")
        if self._writer is None:
            self._writer = _Writer(self._drain)
        self._writer.hand_off()
        self._leading = True

    def _drain(self) -> None:
        """(The writer thread.) Writes groups until the queue is empty, each after waiting for the
        announced callers that may still join it."""
        try:
            while True:
                with self._cond:
                    if not self._queue:
                        return
                    self._await_announced()
                self._write_group()
        finally:
            with self._cond:
                self._leading = False
                self._lead_for_async()  # an item queued after the last look, before the flag fell
                self._cond.notify_all()

    def _await_announced(self) -> None:
        """Waits (holding `_cond`) while announced callers may still join this group, at most
        `max_wait_s`; returns at once when none is announced or the group is full."""
        deadline = None
        while self._expected > 0 and len(self._queue) < self.max_group:
            now = time.monotonic()
            if deadline is None:
                deadline = now + self.max_wait_s
            if now >= deadline:
                return
            with spans.span("submit.group.wait"):
                self._cond.wait(deadline - now)

    def waiting(self) -> int:
        """How many items are queued for a group not yet begun."""
        with self._cond:
            return len(self._queue)

    def announced_waiting(self) -> int:
        """How many announced callers have not queued their work (nor given up) yet."""
        with self._cond:
            return self._expected

    def _write_groups_until(self, mine: _Item) -> None:
        """Writes groups from the queue until `mine` is done (a full queue may take several)."""
        while not mine.done:
            self._write_group(mine)

    def _write_group(self, mine: _Item | None = None) -> None:
        """Writes one group: what is queued once the write lock is held, at most `max_group`."""
        group: list[_Item] = []
        try:
            if self._conn is None:
                self._conn = self.db.engine.connect()
            with spans.span("submit.insert.group"), self.db.write(self._conn) as conn:
                # Taken under the write lock: whatever queued while the lock was awaited
                # (the tick may hold it for a pass) joins this group.
                with self._cond:
                    group, self._queue = self._queue[: self.max_group], self._queue[self.max_group :]
                self._write_items(conn, group)
        except _WriteAgain:
            # Rolled back: written again in a transaction of its own, each item in a savepoint.
            self._write_group_isolated(group)
        except BaseException as failure:  # the commit (or the begin) failed: nothing was kept
            failed = self._fail(group, failure)
            if not group:
                # Even the begin failed: fail the caller's own item (or, for the writer thread,
                # everything queued) rather than spin on it.
                with self._cond:
                    if mine is None:
                        group, self._queue = self._queue, []
                    elif mine in self._queue:
                        self._queue.remove(mine)
                        group = [mine]
                for item in group:
                    item.error = failed
        self._finish(group)

    def _write_items(self, conn: Connection, group: list[_Item]) -> None:
        """Runs a group's items in its transaction, none in a savepoint of its own: an item that
        raises before writing a row (a refused submit) leaves nothing to undo, and one that raises
        after writing raises `_WriteAgain`, which rolls the whole transaction back. A savepoint
        and its release were two of a submitted job's seven statements, and each statement hands
        the interpreter lock to the API's thread and back while SQLite runs it.

        Alone, an item's error rolls the transaction back all the same, which undoes its writes."""
        if len(group) == 1:
            group[0].value = group[0].work(conn)
            return
        for item in group:
            written = rows_written(conn)
            try:
                item.value = item.work(conn)
            except Exception as error:
                # A full disk may have rolled the transaction back already, and other errors do
                # (`transaction_open`), undoing the items before it: redone, as a write.
                if _disk_full(error) or rows_written(conn) != written or not transaction_open(conn):
                    raise _WriteAgain() from error
                item.error = error

    def _write_group_isolated(self, group: list[_Item]) -> None:
        """Writes a group that `_write_items` rolled back: in one transaction again, each item in a
        savepoint, so that an item's error undoes its own writes alone and the rest commit. Its
        items' work runs a second time (the first run's writes were rolled back). An item whose
        error ended the transaction itself (`transaction_open`) undid the items before it too: it
        keeps its error and the others are written once more without it; a full disk fails them all."""
        todo = list(group)
        while todo:
            for item in todo:
                item.value, item.error = None, None
            ended: _Item | None = None
            try:
                assert self._conn is not None
                with spans.span("submit.insert.group"), self.db.write(self._conn) as conn:
                    for item in todo:
                        try:
                            with savepoint(conn):
                                item.value = item.work(conn)
                        except Exception as error:  # this item's writes are undone; its group goes on
                            item.error = self.db.disk_full() if _disk_full(error) else error
                            if not transaction_open(conn):
                                if _disk_full(error):
                                    raise
                                ended = item
                                raise _WriteAgain() from error
            except _WriteAgain:
                todo = [item for item in todo if item is not ended]
                continue
            except BaseException as failure:  # the commit (or the begin) failed: nothing was kept
                self._fail(todo, failure)
            return

    def _fail(self, group: list[_Item], failure: BaseException) -> BaseException:
        """Fails every item of a group whose transaction failed (none of its writes were kept);
        returns the error they get."""
        self._drop_connection()  # the next group starts on a fresh one, whatever this one's state
        failed = self.db.disk_full() if _disk_full(failure) else failure
        for item in group:
            if item.error is None:
                item.value, item.error = None, failed
        return failed

    def _finish(self, group: list[_Item]) -> None:
        """Hands a written (or failed) group's outcomes to its callers."""
        with self._cond:
            for item in group:
                item.done = True
            self.groups += 1
            self.items += len(group)
            self._cond.notify_all()
        _settle_futures([item for item in group if item.future is not None])


def _settle_futures(items: list[_Item]) -> None:
    """Hands async callers' items back to their loops, one wake-up of each loop for all of its items."""
    by_waker: dict[_LoopWaker, list[_Item]] = {}
    for item in items:
        assert item.waker is not None
        by_waker.setdefault(item.waker, []).append(item)
    for waker, mine in by_waker.items():
        waker.wake(mine)


def _settle(item: _Item) -> None:
    """(On the item's loop.) Settles its caller's future, unless the caller gave up (cancelled)."""
    future = item.future
    if future is None or future.done():
        return
    if item.error is not None:
        future.set_exception(item.error)
    else:
        future.set_result(item.value)


def _disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OperationalError) and is_disk_full(exc)


def _outcome(item: _Item) -> Any:
    if item.error is not None:
        raise item.error
    return item.value
