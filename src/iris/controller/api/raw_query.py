"""`ExecuteRawQuery`: runs one caller's read-only SQL so that no query can hurt the controller.

A raw query is arbitrary SQL from a person, so every resource it could take is bounded:
- its own small pool of daemon threads (`QUERY_THREADS`), never the API's: the rest of the API
  never waits behind a query, and a full pool refuses new queries at once instead of queueing them;
- at most one query per caller at once (admins excepted): two endless queries of one user held
  both threads, and every other user's `iris query` was refused until they ended;
- its own connection, opened read-only (`mode=ro`) with `query_only` set, so nothing is written;
- a time limit enforced inside SQLite by a progress handler, which also aborts every running query
  when the controller shuts down (the threads are daemons: shutdown never waits on them);
- a row limit, a result-size limit, and SQLite's own length limit, so no single value
  (`zeroblob(1e9)`, `printf('%.*c', …)`) and no result can take the controller's memory;
- an authorizer that admits only reading statements and the functions listed in
  `ALLOWED_FUNCTIONS` (no zeroblob, randomblob, load_extension or file access), and reads a job's
  env and its workspace's contents (`REDACTED_COLUMNS`) as NULL, for everyone.
"""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from concurrent.futures import Future

from google.protobuf import struct_pb2

from iris.core.errors import InvalidArgument, Unavailable
from iris.rpc import controller_pb2 as pb

QUERY_THREADS = 2
MAX_QUERY_ROWS = 10_000
MAX_RESULT_BYTES = 8 * 1024**2
MAX_VALUE_BYTES = 1024**2
MAX_SQL_CHARS = 64 * 1024
PROGRESS_STEPS = 10_000  # virtual-machine steps between checks of the deadline

ALLOWED_FUNCTIONS = frozenset(
    """abs avg count max min sum total group_concat string_agg coalesce ifnull nullif iif length
    octet_length lower upper substr substring trim ltrim rtrim replace instr round typeof printf format
    date time datetime julianday strftime unixepoch timediff hex unhex quote like glob char unicode
    sign random likely unlikely row_number rank dense_rank lag lead first_value last_value nth_value
    ntile percent_rank cume_dist json json_extract json_type json_valid json_array_length json_object
    json_array json_group_array json_group_object json_each json_tree json_quote concat concat_ws
    ceil ceiling floor trunc exp ln log log10 log2 pow power sqrt mod pi""".split()
)
_READ_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE})
# A double past its range (`SELECT 1e999`) is infinite, which neither JSON nor the answer's number
# values can carry: the query asked for a number no answer can hold, so it is the query's error.
_NOT_FINITE = (
    "column {column!r} holds a number beyond the range of a double (such as 1e999, read as infinite);"
    " select it as text instead, e.g. CAST(x AS TEXT)"
)
_READ_ONLY = "iris query is read-only: only SELECT (and WITH … SELECT) statements may run"


# Columns a raw query reads as NULL: a job's env is where its secrets live, and it is shown only to
# the job's owner and admins, never through SQL that any user may run; a job's workspace (its
# bundle and workdir files) is its owner's code and files, credentials often among them.
REDACTED_COLUMNS = frozenset({("job_config", "env"), ("bundles", "data"), ("job_files", "data")})


def _authorize(action, arg1, arg2, _db, _source):
    if action == sqlite3.SQLITE_READ and (arg1, arg2) in REDACTED_COLUMNS:
        return sqlite3.SQLITE_IGNORE
    if action in _READ_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in ALLOWED_FUNCTIONS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


class RawQueryRunner:
    """Runs raw queries on `QUERY_THREADS` daemon threads; `submit` refuses when all are busy."""

    def __init__(self, db_path: str, time_limit_s: float = 10.0, threads: int = QUERY_THREADS):
        self.db_path = db_path
        self.time_limit_s = time_limit_s
        self._slots = threading.BoundedSemaphore(threads)
        self._threads = threads
        self._closing = threading.Event()
        self._callers: set[str] = set()  # principals with a query running now
        self._callers_lock = threading.Lock()

    def submit(self, query: str, limit: int, caller: str = "") -> Future:
        """Starts `query` on a pool thread; the future holds the response or a typed error. A
        `caller` (a principal; "" for an admin) may run one query at a time."""
        if self._closing.is_set():
            raise Unavailable("the controller is shutting down; run the query again once it is back")
        if not query.strip():
            raise InvalidArgument('the query is empty; e.g. iris query "SELECT job_id, state FROM jobs"')
        if len(query) > MAX_SQL_CHARS:
            raise InvalidArgument(f"the query is {len(query)} characters long; at most {MAX_SQL_CHARS} are allowed")
        with self._callers_lock:
            if caller and caller in self._callers:
                raise Unavailable(
                    f"{caller} already has a raw query running; each caller runs one at a time, so that the"
                    f" {self._threads} this controller runs at once stay open to others. Try again when it has finished"
                )
            if not self._slots.acquire(blocking=False):
                raise Unavailable(
                    f"{self._threads} raw queries are already running (the most this controller runs at once);"
                    " try again when one has finished"
                )
            if caller:
                self._callers.add(caller)
        future: Future = Future()
        thread = threading.Thread(target=self._run, args=(query, limit, future, caller), name="raw-query", daemon=True)
        try:
            thread.start()
        except BaseException:
            self._done(caller)
            raise
        return future

    def _done(self, caller: str) -> None:
        with self._callers_lock:
            self._callers.discard(caller)
            self._slots.release()

    def close(self) -> None:
        """Aborts running queries (at their next progress check) and refuses new ones."""
        self._closing.set()

    def _run(self, query: str, limit: int, future: Future, caller: str = "") -> None:
        # The slot is free before the caller hears the answer, so a script that sends its next
        # query as soon as one returns is never refused as over the limit.
        try:
            result = self.run(query, limit)
        except BaseException as exc:
            self._done(caller)
            future.set_exception(exc)
            return
        self._done(caller)
        future.set_result(result)

    def run(self, query: str, limit: int) -> pb.ExecuteRawQueryResponse:
        """Runs one query on this thread, within every limit of this module."""
        deadline = time.monotonic() + self.time_limit_s
        conn = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, timeout=5, check_same_thread=False)
        try:
            conn.execute("PRAGMA query_only=ON")
            conn.execute("PRAGMA temp_store=FILE")  # sorts and recursive CTEs spill to disk, not memory
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
            conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, MAX_SQL_CHARS)
            conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            conn.set_authorizer(_authorize)
            conn.set_progress_handler(
                lambda: int(self._closing.is_set() or time.monotonic() > deadline), PROGRESS_STEPS
            )
            try:
                cur = conn.execute(query)
                if cur.description is None:
                    raise InvalidArgument(_READ_ONLY)
                return self._collect(cur, limit)
            except sqlite3.Warning:
                raise InvalidArgument("run one statement at a time") from None
            except sqlite3.DatabaseError as exc:
                raise self._explain(str(exc)) from None
        finally:
            conn.close()

    def _explain(self, msg: str) -> InvalidArgument | Unavailable:
        if "interrupted" in msg:
            if self._closing.is_set():
                return Unavailable("the query was stopped because the controller is shutting down")
            return InvalidArgument(
                f"the query ran longer than {self.time_limit_s:g}s and was stopped; narrow it with WHERE or LIMIT"
            )
        if "not authorized" in msg or "readonly" in msg or "query_only" in msg:
            return InvalidArgument(
                _READ_ONLY + "; functions other than common scalar, aggregate, date and JSON ones are refused"
            )
        if "too big" in msg:
            return InvalidArgument(f"a value of the query is larger than {MAX_VALUE_BYTES} bytes; select less")
        return InvalidArgument(f"query failed: {msg}")

    @staticmethod
    def _collect(cur: sqlite3.Cursor, limit: int) -> pb.ExecuteRawQueryResponse:
        limit = min(limit or MAX_QUERY_ROWS, MAX_QUERY_ROWS) if limit >= 0 else MAX_QUERY_ROWS
        resp = pb.ExecuteRawQueryResponse(columns=[d[0] for d in cur.description])
        size = 0
        while True:
            row = cur.fetchone()
            if row is None:
                break
            if len(resp.rows) >= limit or size > MAX_RESULT_BYTES:
                resp.truncated = True
                break
            lv = struct_pb2.ListValue()
            for v in row:
                if isinstance(v, bytes):
                    v = v.hex()
                elif isinstance(v, float) and not math.isfinite(v):
                    raise InvalidArgument(_NOT_FINITE.format(column=cur.description[len(lv.values)][0]))
                size += len(v) if isinstance(v, str) else 8
                lv.values.add().CopyFrom(_value(v))
            resp.rows.append(lv)
        return resp


def _value(v) -> struct_pb2.Value:
    out = struct_pb2.Value()
    if v is None:
        out.null_value = struct_pb2.NULL_VALUE
    elif isinstance(v, bool):
        out.bool_value = v
    elif isinstance(v, (int, float)):
        out.number_value = v
    else:
        out.string_value = str(v)
    return out
