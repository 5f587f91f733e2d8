"""Runs the common forms of `iris job list` over Connect JSON, printing what the click command prints.

A listing is what people and scripts poll most, and as its own process most of its time went to
importing click and the protobuf runtime. This module reads the flags `iris job list` takes (but
not `--watch`, which stays with click), fetches the pages through the same `iris.cli.pages.collect`
with the controller's JSON answer, and prints through the same `iris.cli.output.jobs_table` and
`iris.cli.pages.hint`.

`-o json` must print what `message_to_dict` prints for each job: every field of JobStatus (those
at their default too, except unset messages), in the order protobuf's JSON printer uses (the fields
the message holds, by number, then the rest, by number), int64 as numbers. `JOB_FIELDS` and its
nested tables describe JobStatus for that; a test holds them to the generated descriptor.

A listing is read-only, so stepping aside is always safe: any flag or value this module does not
take, any error, and any answer it cannot read (a field it does not know) returns None before
anything is printed, and `iris.cli.main` runs the click command instead.
"""

from __future__ import annotations

import math

from iris.cli.main import CliContext

# (proto name, Connect JSON name, kind): kinds "str", "int" (int32 and int64), "float" (double),
# "bool", "map" (string to int32), "strs" (repeated string), or a nested table (a message), or a
# one-item list holding a nested table (a repeated message).
DEVICE_FIELDS = (
    ("kind", "kind", "str"),
    ("variant", "variant", "str"),
    ("count", "count", "int"),
    ("topology", "topology", "str"),
)
RESOURCES_FIELDS = (
    ("cpu", "cpu", "float"),
    ("memory_bytes", "memoryBytes", "int"),
    ("disk_bytes", "diskBytes", "int"),
    ("device", "device", DEVICE_FIELDS),
)
CONSTRAINT_FIELDS = (
    ("key", "key", "str"),
    ("op", "op", "str"),
    ("values", "values", "strs"),
    ("preferred", "preferred", "bool"),
)
JOB_FIELDS = (
    ("job_id", "jobId", "str"),
    ("state", "state", "str"),
    ("user", "user", "str"),
    ("priority", "priority", "str"),
    ("cluster", "cluster", "str"),
    ("replicas", "replicas", "int"),
    ("task_counts", "taskCounts", "map"),
    ("submitted_ms", "submittedMs", "int"),
    ("started_ms", "startedMs", "int"),
    ("finished_ms", "finishedMs", "int"),
    ("pending_reason", "pendingReason", "str"),
    ("error", "error", "str"),
    ("parent_job_id", "parentJobId", "str"),
    ("resources", "resources", RESOURCES_FIELDS),
    ("command", "command", "strs"),
    ("constraints", "constraints", [CONSTRAINT_FIELDS]),
    ("handoff_state", "handoffState", "str"),
    ("peer_id", "peerId", "str"),
    ("stale", "stale", "bool"),
    ("exit_code", "exitCode", "int"),
    ("has_exit_code", "hasExitCode", "bool"),
    ("owner", "owner", "str"),
    ("last_sync_ms", "lastSyncMs", "int"),
)
_DEFAULTS = {"str": "", "int": 0, "float": 0.0, "bool": False}
_PAGE_FIELDS = frozenset(("jobs", "nextPageToken", "next_page_token", "total"))


class Unreadable(Exception):
    """An answer holding something this module does not know how to print as protobuf would."""


class _Row:
    """A job of a JSON page with the attributes `jobs_table` reads, and its `-o json` document."""

    def __init__(self, doc: dict):
        self.doc = doc
        self.job_id = doc["job_id"]
        self.state = doc["state"]
        self.cluster = doc["cluster"]
        self.task_counts = doc["task_counts"]
        self.replicas = doc["replicas"]
        self.submitted_ms = doc["submitted_ms"]
        self.pending_reason = doc["pending_reason"]
        self.error = doc["error"]


class _Page:
    """One ListJobs answer, as `collect` reads a page."""

    def __init__(self, doc: dict):
        if not isinstance(doc, dict) or set(doc) - _PAGE_FIELDS:
            raise Unreadable("page")
        jobs = doc.get("jobs", [])
        if not isinstance(jobs, list):
            raise Unreadable("jobs")
        self.jobs = [_Row(message_doc(job, JOB_FIELDS)) for job in jobs]
        self.next_page_token = _value(doc.get("nextPageToken", doc.get("next_page_token", "")), "str")
        self.total = _value(doc.get("total", 0), "int")


def message_doc(doc: object, fields: tuple) -> dict:
    """A message's Connect JSON document as `message_to_dict` prints the message, or Unreadable."""
    if not isinstance(doc, dict):
        raise Unreadable("not an object")
    known = {name for field in fields for name in field[:2]}
    if set(doc) - known:
        raise Unreadable(f"unknown fields {sorted(set(doc) - known)}")
    held: dict = {}
    unset: dict = {}
    for name, json_name, kind in fields:
        raw = doc.get(json_name, doc.get(name))
        if isinstance(kind, tuple):
            if raw is not None:
                held[name] = message_doc(raw, kind)
            continue  # an unset message is left out
        value = _value(raw, kind)
        if value == _empty(kind) and not (isinstance(value, float) and math.copysign(1.0, value) < 0):
            unset[name] = value
        else:
            held[name] = value
    return {**held, **unset}


def _empty(kind: object) -> object:
    if isinstance(kind, list) or kind == "strs":
        return []
    if kind == "map":
        return {}
    return _DEFAULTS[kind]  # type: ignore[index]


def _value(raw: object, kind: object) -> object:
    """One field's value in the type `message_to_dict` prints it with."""
    if raw is None:
        return _empty(kind)
    if isinstance(kind, list):
        if not isinstance(raw, list):
            raise Unreadable("not a list")
        return [message_doc(item, kind[0]) for item in raw]
    if kind == "strs":
        if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
            raise Unreadable("not a list of strings")
        return list(raw)
    if kind == "map":
        if not isinstance(raw, dict):
            raise Unreadable("not a map")
        return {str(key): _value(value, "int") for key, value in raw.items()}
    if kind == "str":
        if not isinstance(raw, str):
            raise Unreadable("not a string")
        return raw
    if kind == "bool":
        if not isinstance(raw, bool):
            raise Unreadable("not a bool")
        return raw
    if kind == "int":
        if isinstance(raw, bool) or not isinstance(raw, (int, str)):
            raise Unreadable("not an integer")
        return int(raw)
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
        raise Unreadable("not a finite number")  # NaN and infinities print as strings: click's to show
    return float(raw)


def job_list(obj: CliContext, opts: dict) -> int | None:
    """`iris job list` with the options `iris.cli.lean` read, or None when click must run it."""
    from iris.cli.main import echo
    from iris.cli.output import jobs_table
    from iris.cli.pages import MAX_PAGE, collect, hint
    from iris.cli.values import JOB_STATES

    try:
        state = opts.get("state")
        if state is not None:
            state = state.strip().upper()
            if state not in JOB_STATES:
                return None
        limit, page_size = int(opts.get("limit", "0")), int(opts.get("page_size", "0"))
        if limit < 0 or not 0 <= page_size <= MAX_PAGE or (limit and opts.get("everything")):
            return None
        prefix, user = opts.get("prefix"), opts.get("user")
        client = obj.client()
        request = {"state": state or "", "prefix": prefix or "", "user": user or ""}

        def fetch(token: str, size: int) -> _Page:
            return _Page(client.job_page_json({**request, "limit": size, "pageToken": token}))

        got = collect(fetch, "jobs", limit, bool(opts.get("everything")), page_size)
    except Exception:  # whatever it is, the click command reports it as it always has
        return None
    jobs = got.rows
    if obj.json:
        obj.emit({"jobs": [job.doc for job in jobs], "total": got.total})
    elif jobs:
        echo(jobs_table(jobs))
    else:
        echo("no jobs" + (f" in state {state}" if state else "") + (f" under {prefix}" if prefix else ""), err=True)
    hint(got, "jobs")
    return 0
