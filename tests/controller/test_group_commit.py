"""Submits that arrive together share one transaction: each caller returns only once its rows are
committed, one item's failure undoes its own writes alone, and a failed commit keeps nothing."""

from __future__ import annotations

import asyncio
import threading

import pytest
from sqlalchemy.exc import IntegrityError

from iris.controller.db.database import Database, sql
from iris.controller.db.group_commit import GroupCommit
from iris.core.errors import InvalidArgument
from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client


@pytest.fixture
def db(tmp_path):
    db = Database(tmp_path / "controller.db")
    with db.write() as conn:
        conn.execute(sql("CREATE TABLE parent (id TEXT PRIMARY KEY)"))
        conn.execute(
            sql(
                "CREATE TABLE child (id TEXT PRIMARY KEY, pid TEXT REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)"
            )
        )
    yield db
    db.close()


def _insert(key: str, fail: bool = False):
    def work(conn):
        conn.execute(sql("INSERT INTO parent (id) VALUES (:k)"), {"k": key})
        if fail:
            raise InvalidArgument(f"{key} is refused")
        return key

    return work


def _stored(db: Database) -> set[str]:
    with db.read() as conn:
        return {r[0] for r in conn.execute(sql("SELECT id FROM parent"))}


def _run_together(db: Database, commits: GroupCommit, works: list) -> list:
    """Runs each work on its own thread while the write lock is held, so all of them queue, then
    lets them go; returns each thread's value or exception, in order."""
    outcomes: list = [None] * len(works)

    def call(i: int) -> None:
        try:
            outcomes[i] = commits.run(works[i])
        except Exception as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(works))]
    with db.write():  # the leader waits for this lock; everyone else queues behind it
        for t in threads:
            t.start()
        wait_until(lambda: commits.waiting() == len(works), message="every caller queued")
    for t in threads:
        t.join(timeout=30)
    return outcomes


def test_group_commit_callers_that_queue_together_share_one_transaction(db):
    commits = GroupCommit(db)
    outcomes = _run_together(db, commits, [_insert(f"k{i}") for i in range(5)])
    assert outcomes == [f"k{i}" for i in range(5)]
    assert _stored(db) == {f"k{i}" for i in range(5)}
    assert (commits.groups, commits.items) == (1, 5)


def test_group_commit_failing_item_undoes_its_own_writes_and_the_rest_commit(db):
    commits = GroupCommit(db)
    outcomes = _run_together(db, commits, [_insert("a"), _insert("bad", fail=True), _insert("c")])
    assert outcomes[0] == "a" and outcomes[2] == "c"
    assert isinstance(outcomes[1], InvalidArgument) and "bad is refused" in str(outcomes[1])
    assert _stored(db) == {"a", "c"}
    assert commits.groups == 1


def test_group_commit_item_refused_before_writing_costs_its_group_no_savepoint_and_no_second_run(db):
    from sqlalchemy import event

    statements: list[str] = []
    event.listen(
        db.engine, "checkout", lambda dbapi_conn, record, proxy: dbapi_conn.set_trace_callback(statements.append)
    )
    runs: list[str] = []

    def counted(key: str, refuse: bool = False):
        def work(conn):
            runs.append(key)
            if refuse:  # as a duplicate submit is refused: after its reads, before any write
                conn.execute(sql("SELECT id FROM parent WHERE id = :k"), {"k": key}).first()
                raise InvalidArgument(f"{key} is refused")
            return _insert(key)(conn)

        return work

    commits = GroupCommit(db)
    outcomes = _run_together(db, commits, [counted("a"), counted("dup", refuse=True), counted("c")])
    assert outcomes[0] == "a" and outcomes[2] == "c"
    assert isinstance(outcomes[1], InvalidArgument) and "dup is refused" in str(outcomes[1])
    assert _stored(db) == {"a", "c"} and commits.groups == 1
    assert runs == ["a", "dup", "c"]
    assert not [s for s in statements if "SAVEPOINT" in s.upper()], statements


def test_group_commit_item_failing_after_its_writes_has_the_group_written_again_without_them(db):
    runs: list[str] = []

    def counted(key: str, fail: bool = False):
        def work(conn):
            runs.append(key)
            return _insert(key, fail=fail)(conn)

        return work

    commits = GroupCommit(db)
    outcomes = _run_together(db, commits, [counted("a"), counted("bad", fail=True), counted("c")])
    assert outcomes[0] == "a" and outcomes[2] == "c" and isinstance(outcomes[1], InvalidArgument)
    assert _stored(db) == {"a", "c"} and commits.groups == 1
    # The first run stopped at the failure that wrote; the second wrote each item in a savepoint.
    assert runs == ["a", "bad", "a", "bad", "c"]


def test_group_commit_failed_commit_fails_every_item_and_keeps_nothing(db):
    commits = GroupCommit(db)

    def orphan(conn):  # a deferred foreign key: refused only by the commit itself
        conn.execute(sql("INSERT INTO child (id, pid) VALUES ('c1', 'nobody')"))
        return "orphan"

    outcomes = _run_together(db, commits, [_insert("a"), orphan, _insert("b")])
    assert all(isinstance(o, IntegrityError) for o in outcomes), outcomes
    assert _stored(db) == set()
    # The next caller is not affected by the failed group.
    assert commits.run(_insert("after")) == "after"
    assert _stored(db) == {"after"}


def test_group_commit_lone_caller_commits_at_once_in_a_group_of_one(db):
    commits = GroupCommit(db, max_wait_s=3600)  # nothing announced: an hour's patience is never used
    assert commits.run(_insert("solo")) == "solo"
    assert _stored(db) == {"solo"} and (commits.groups, commits.items) == (1, 1)


def test_group_commit_lone_failing_caller_gets_its_error_and_keeps_nothing(db):
    commits = GroupCommit(db)
    with pytest.raises(InvalidArgument, match="alone is refused"):
        commits.run(_insert("alone", fail=True))

    def orphan(conn):  # refused by the commit itself
        conn.execute(sql("INSERT INTO child (id, pid) VALUES ('c1', 'nobody')"))

    with pytest.raises(IntegrityError):
        commits.run(orphan)
    assert _stored(db) == set() and (commits.groups, commits.items) == (2, 2)
    assert commits.run(_insert("next")) == "next" and _stored(db) == {"next"}


def _announced_caller(commits: GroupCommit, go: threading.Event, outcomes: dict, give_up: bool = False):
    """A caller that announces itself at once and brings its work only once `go` is set."""

    def call() -> None:
        try:
            with commits.announced() as note:
                go.wait(30)
                if give_up:
                    raise InvalidArgument("refused before its insert")
                outcomes["late"] = commits.run(_insert("late"), note)
        except InvalidArgument as exc:
            outcomes["late"] = exc

    return threading.Thread(target=call)


def _leader(commits: GroupCommit, outcomes: dict) -> threading.Thread:
    def call() -> None:
        outcomes["leader"] = commits.run(_insert("leader"))

    return threading.Thread(target=call)


def test_group_commit_leader_waits_for_an_announced_caller_and_they_share_one_commit(db):
    commits = GroupCommit(db, max_wait_s=3600)
    go, outcomes = threading.Event(), {}
    late = _announced_caller(commits, go, outcomes)
    late.start()
    wait_until(lambda: commits.announced_waiting() == 1, message="the late caller announced")
    leader = _leader(commits, outcomes)
    leader.start()
    wait_until(lambda: commits.waiting() == 1, message="the leader queued its own work and waits")
    assert commits.groups == 0  # it waits for the announced caller instead of committing alone
    go.set()
    for t in (late, leader):
        t.join(timeout=30)
    assert outcomes == {"leader": "leader", "late": "late"}
    assert (commits.groups, commits.items) == (1, 2) and _stored(db) == {"leader", "late"}


def test_group_commit_leader_stops_waiting_when_an_announced_caller_gives_up(db):
    commits = GroupCommit(db, max_wait_s=3600)
    go, outcomes = threading.Event(), {}
    late = _announced_caller(commits, go, outcomes, give_up=True)
    late.start()
    wait_until(lambda: commits.announced_waiting() == 1, message="the late caller announced")
    leader = _leader(commits, outcomes)
    leader.start()
    wait_until(lambda: commits.waiting() == 1, message="the leader queued its own work and waits")
    go.set()  # the announced caller's request is refused: it never brings work
    for t in (late, leader):
        t.join(timeout=30)
    assert outcomes["leader"] == "leader" and isinstance(outcomes["late"], InvalidArgument)
    assert (commits.groups, commits.items) == (1, 1) and commits.announced_waiting() == 0
    assert _stored(db) == {"leader"}


def test_concurrent_submits_of_one_name_create_it_once_and_refuse_the_rest(controller):
    names = [f"same-{i}" for i in range(15)]
    results: list[tuple[str, str]] = []
    lock = threading.Lock()

    def submit_all() -> None:
        c = client(controller)
        for name in names:
            try:
                reply = c.launch_job(pb.LaunchJobRequest(name=name, user="alice", command=["true"]))
                outcome = reply.disposition
            except Exception as exc:  # the refused duplicates
                outcome = getattr(getattr(exc, "code", None), "name", type(exc).__name__)
            with lock:
                results.append((name, outcome))

    threads = [threading.Thread(target=submit_all) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 4 * len(names)
    for name in names:
        outcomes = sorted(o for n, o in results if n == name)
        assert outcomes == ["ALREADY_EXISTS"] * 3 + ["local"], (name, outcomes)
    c = client(controller)
    rows = c.execute_raw_query(
        pb.ExecuteRawQueryRequest(
            sql="SELECT COUNT(*), COUNT(DISTINCT job_id) FROM tasks WHERE job_id LIKE '/alice/same-%'"
        )
    ).rows[0]
    assert rows.values[0].number_value == rows.values[1].number_value == len(names)


# -- callers on an event loop (`run_async`) ---------------------------------------------------------


def _gather_async(commits: GroupCommit, works: list, while_queued=None) -> tuple[list, int]:
    """Runs each work through `run_async` on one event loop; `while_queued` runs (on a thread) once
    every one is queued. Returns each outcome (value or exception) and how often the loop ran a
    timer meanwhile (it is never blocked by the write)."""

    async def main() -> tuple[list, int]:
        beats = 0

        async def heartbeat() -> None:
            nonlocal beats
            while True:
                beats += 1
                await asyncio.sleep(0)

        beat = asyncio.create_task(heartbeat())
        calls = [asyncio.create_task(commits.run_async(w)) for w in works]
        if while_queued is not None:
            await asyncio.to_thread(while_queued)
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        beat.cancel()
        return list(outcomes), beats

    return asyncio.run(main())


def test_group_commit_async_callers_share_one_transaction_written_off_the_loop(db):
    commits = GroupCommit(db)
    held, release = threading.Event(), threading.Event()

    def hold_the_write_lock() -> None:  # the writer waits for it; every async caller queues meanwhile
        with db.write():
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold_the_write_lock)
    holder.start()
    held.wait(30)

    def release_once_queued() -> None:
        wait_until(lambda: commits.waiting() == 4, message="every async caller queued")
        release.set()

    outcomes, beats = _gather_async(
        commits, [_insert("a"), _insert("bad", fail=True), _insert("c"), _insert("d")], release_once_queued
    )
    holder.join(timeout=30)
    assert outcomes[0] == "a" and outcomes[2:] == ["c", "d"]
    assert isinstance(outcomes[1], InvalidArgument) and "bad is refused" in str(outcomes[1])
    assert _stored(db) == {"a", "c", "d"} and (commits.groups, commits.items) == (1, 4)
    assert beats > 0  # the loop kept running while the write waited for its lock
    commits.close()


def test_group_commit_async_failed_commit_fails_every_item_and_the_next_commits(db):
    commits = GroupCommit(db)

    def orphan(conn):  # a deferred foreign key: refused only by the commit itself
        conn.execute(sql("INSERT INTO child (id, pid) VALUES ('c1', 'nobody')"))

    outcomes, _ = _gather_async(commits, [orphan])
    assert isinstance(outcomes[0], IntegrityError) and _stored(db) == set()
    assert _gather_async(commits, [_insert("after")])[0] == ["after"] and _stored(db) == {"after"}
    commits.close()


def test_group_commit_async_item_queued_behind_a_thread_leader_is_still_written(db):
    commits = GroupCommit(db)
    inside, resume = threading.Event(), threading.Event()

    def slow(conn):  # the thread leader's own item holds its group open until told
        conn.execute(sql("INSERT INTO parent (id) VALUES ('leader')"))
        inside.set()
        resume.wait(30)
        return "leader"

    outcomes: dict = {}
    leader = threading.Thread(target=lambda: outcomes.setdefault("leader", commits.run(slow)))
    leader.start()
    inside.wait(30)

    def release_once_queued() -> None:
        wait_until(lambda: commits.waiting() == 1, message="the async caller queued behind the leader's group")
        resume.set()

    # The leader stops once its own item is written; the async item queued after its group was
    # taken has no thread of its own to lead, so the writer thread takes it over.
    assert _gather_async(commits, [_insert("late")], release_once_queued)[0] == ["late"]
    leader.join(timeout=30)
    assert outcomes == {"leader": "leader"} and _stored(db) == {"leader", "late"}
    assert (commits.groups, commits.items) == (2, 2)
    commits.close()


def test_group_commit_groups_keep_one_connection_and_a_failed_commit_takes_a_fresh_one(db):
    from sqlalchemy import event

    checkouts: list[int] = []
    event.listen(db.engine, "checkout", lambda dbapi_conn, record, proxy: checkouts.append(id(dbapi_conn)))
    commits = GroupCommit(db)
    for key in ("a", "b", "c"):
        assert commits.run(_insert(key)) == key
    assert len(checkouts) == 1  # one connection for every group, not one from the pool for each

    def orphan(conn):  # refused only by the commit itself
        conn.execute(sql("INSERT INTO child (id, pid) VALUES ('c1', 'nobody')"))

    with pytest.raises(IntegrityError):
        commits.run(orphan)
    assert commits.run(_insert("d")) == "d" and len(checkouts) == 2
    assert _stored(db) == {"a", "b", "c", "d"}
    commits.close()
    assert db.engine.pool.checkedout() == 0


def test_group_commit_closed_twice_stops_its_writer_once_and_refuses_more_async_work(db):
    commits = GroupCommit(db)
    assert _gather_async(commits, [_insert("a")])[0] == ["a"]
    commits.close()
    commits.close()
    outcomes, _ = _gather_async(commits, [_insert("b")])
    assert isinstance(outcomes[0], RuntimeError) and _stored(db) == {"a"}


class _CountingCondition(threading.Condition):
    """A condition counting how often its waiters were woken (or timed out)."""

    def __init__(self) -> None:
        super().__init__()
        self.wakes = 0

    def wait(self, timeout=None):
        woken = super().wait(timeout)
        self.wakes += 1
        return woken


def test_group_commit_leader_is_woken_once_every_announced_caller_has_queued(db):
    import time

    commits = GroupCommit(db, max_wait_s=3600)
    commits._cond = cond = _CountingCondition()
    outcomes: dict = {}
    gates = [threading.Event() for _ in range(3)]

    def announced(key: str, go: threading.Event) -> threading.Thread:
        def call() -> None:
            with commits.announced() as note:
                go.wait(30)
                outcomes[key] = commits.run(_insert(key), note)

        return threading.Thread(target=call)

    callers = [announced(f"late{i}", go) for i, go in enumerate(gates)]
    for t in callers:
        t.start()
    wait_until(lambda: commits.announced_waiting() == 3, message="three callers announced")
    leader = _leader(commits, outcomes)
    leader.start()
    wait_until(lambda: commits.waiting() == 1, message="the leader queued its own work and waits")
    before = cond.wakes
    for i, go in enumerate(gates[:2]):
        go.set()
        wait_until(lambda i=i: commits.waiting() == 2 + i, message="the next caller queued")
    time.sleep(0.2)
    assert cond.wakes == before  # two of three queued: no one had a reason to look yet
    gates[2].set()
    for t in (*callers, leader):
        t.join(timeout=30)
    assert outcomes == {"leader": "leader", "late0": "late0", "late1": "late1", "late2": "late2"}
    assert (commits.groups, commits.items) == (1, 4)


def test_group_commit_item_whose_error_ended_the_transaction_has_its_group_written_again(db):
    """Some errors end the whole transaction in SQLite itself, whatever the statement wrote (an
    I/O error, no memory, an interrupted write): the items written before it were undone with it
    and must not be answered as committed."""
    from iris.controller.db.database import _driver

    def interrupted(conn):
        driver = _driver(conn)
        driver.create_function("interrupt_now", 0, lambda: driver.interrupt())
        # Interrupted while it looks for rows to insert, before it has inserted any.
        conn.execute(
            sql(
                "INSERT INTO parent (id) WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000)"
                " SELECT 'never' || i FROM n WHERE coalesce(interrupt_now(), 0)"
            )
        )

    commits = GroupCommit(db)
    outcomes = _run_together(db, commits, [_insert("a"), interrupted, _insert("c")])
    assert isinstance(outcomes[1], Exception)
    committed = {o for o in outcomes if isinstance(o, str)}
    assert committed <= _stored(db), (outcomes, _stored(db))
    assert committed == {"a", "c"}
