"""The controller's one database handle: serialised write transactions and snapshot reads.

The controller is the single writer. Writes take a process-wide lock and then `BEGIN IMMEDIATE`,
so two threads (the API and the control tick) never interleave a transaction; reads run in a
deferred transaction, which in WAL mode sees one consistent snapshot and never blocks the writer.
"""

from __future__ import annotations

import functools
import json
import logging
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, cast

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, OperationalError

from iris.controller.db.schema import migrate, open_engine
from iris.core.errors import DiskFull

log = logging.getLogger("iris.db")


def is_disk_full(exc: BaseException) -> bool:
    orig = getattr(exc, "orig", exc)
    return getattr(orig, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(orig)


class Database:
    def __init__(self, path: Path):
        self.path = path
        self.engine = open_engine(path)
        self._write_lock = threading.RLock()
        # Moved twice by each write transaction: to odd as it begins, to even once it has ended
        # (committed or not), before `write` returns to its caller. A commit shows to other reads
        # while the generation is still odd, so a read that began at an even generation still
        # current has seen every write anyone could see (`iris.controller.db.answers` keeps
        # reads on it).
        self.generation = 0
        applied = migrate(self.engine)
        if applied:
            log.info("database %s: applied migrations %s", path, ", ".join(map(str, applied)))

    @contextmanager
    def write(self, kept: Connection | None = None) -> Iterator[Connection]:
        """One write transaction: committed on exit, rolled back on an exception. A full disk
        raises DiskFull: the transaction is rolled back whole, and the same write works again
        once space is freed. `kept`: a connection its caller keeps open between transactions
        (left open), instead of one taken from the pool for this one."""
        try:
            with self._write_lock, nullcontext(kept) if kept is not None else self.engine.connect() as conn:
                self.generation += 1
                try:
                    with conn.begin():
                        yield conn
                finally:
                    self.generation += 1
        except OperationalError as exc:
            if is_disk_full(exc):
                raise self.disk_full() from None
            raise

    def disk_full(self) -> DiskFull:
        """The error for a write refused because the database's disk is full."""
        return DiskFull(
            f"the controller's disk is full ({self.path.parent}): nothing was written; free space there and retry"
        )

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """One consistent read snapshot."""
        with self.engine.connect().execution_options(iris_read=True) as conn:
            with conn.begin():
                yield conn

    def close(self) -> None:
        self.engine.dispose()


# A statement's TextClause is built once and reused: building one parses its bind parameters,
# which on the submit path cost more than executing the statement.
sql = functools.lru_cache(maxsize=4096)(text)


def _driver(conn: Connection) -> sqlite3.Connection:
    """The SQLite connection under an open SQLAlchemy connection (its transaction is on it)."""
    return cast(sqlite3.Connection, conn.connection.driver_connection)


def rows_written(conn: Connection) -> int:
    """Rows the connection's INSERT, UPDATE and DELETE statements (their triggers' included) have
    written since it was opened; a statement that failed wrote none."""
    return _driver(conn).total_changes


def transaction_open(conn: Connection) -> bool:
    """Whether the connection's transaction is still open: SQLite ends it itself, undoing all of
    it, on some errors of a statement (an I/O error, no memory, an interrupt, at times a full disk),
    whatever that statement wrote."""
    return _driver(conn).in_transaction


def run(conn: Connection, statement: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> sqlite3.Cursor:
    """Executes one statement of the open transaction on its driver connection.

    For the statements every submitted job pays for: SQLAlchemy's statement path took about
    100 µs a statement on this machine's 2-core host, the driver alone about 25 µs, and one job
    costs about a dozen statements between its submit and its exit. The text keeps SQLAlchemy's
    `:name` parameters (SQLite reads them itself); a driver error is raised as SQLAlchemy's
    error of the same kind, so callers catch one family of errors.
    """
    try:
        return _driver(conn).execute(statement, params)
    except sqlite3.Error as exc:
        raise DBAPIError.instance(statement, params, exc, sqlite3.Error) from exc


def mapped(conn: Connection, statement: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> list[sqlite3.Row]:
    """`run`'s rows, each read by column name as well as by position (`row["state"]`).

    For the lists the API serves a page of at once: SQLAlchemy's mapped rows cost about 3 µs a row
    more than the driver's own (sqlite3.Row), a tenth of a 1,000-job page's time on the controller.
    """
    try:
        cursor = _driver(conn).cursor()
        cursor.row_factory = sqlite3.Row
        return cursor.execute(statement, params).fetchall()
    except sqlite3.Error as exc:
        raise DBAPIError.instance(statement, params, exc, sqlite3.Error) from exc


def run_many(conn: Connection, statement: str, rows: Sequence[Mapping[str, Any] | Sequence[Any]]) -> None:
    """`run` for one statement over many parameter rows."""
    try:
        _driver(conn).executemany(statement, rows)
    except sqlite3.Error as exc:
        raise DBAPIError.instance(statement, rows, exc, sqlite3.Error) from exc


@contextmanager
def savepoint(conn: Connection) -> Iterator[None]:
    """A savepoint of the open transaction: the block's writes are undone if it raises, and the
    error goes on. Issued on the driver (`run`): through SQLAlchemy a savepoint and its release
    cost as much as the small writes the tick makes inside one for each placement and exit."""
    run(conn, "SAVEPOINT iris_step")
    try:
        yield
    except BaseException:
        try:
            run(conn, "ROLLBACK TO iris_step")
            run(conn, "RELEASE iris_step")
        except Exception:  # the transaction itself fails: its rollback undoes the step too
            log.warning("undoing one step of a transaction failed; the whole transaction is undone")
        raise
    run(conn, "RELEASE iris_step")


def dumps(value) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def loads(value: str | None):
    return json.loads(value) if value else None
