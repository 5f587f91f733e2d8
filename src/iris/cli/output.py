"""Formats what the CLI prints: aligned tables, ages and durations, log lines, and JSON documents.

These are pure functions of the API's messages so the table layout and the JSON shape can be tested
without a controller. JSON uses the proto field names (`job_id`, not `jobId`) and prints every field,
so `jq .exit_code` works on a job that exited 0.
"""

from __future__ import annotations

import sys
import time

TYPE_CHECKING = False  # typing's own constant costs `import typing`: `job run -o json` prints through here
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any


def message_to_dict(message: Any) -> dict[str, Any]:
    """`message` as a JSON document: every field by its proto name, a map's entries by key (protobuf
    keeps a decoded map in an order that changes from one process to the next)."""
    from google.protobuf import json_format

    doc = json_format.MessageToDict(
        message,
        always_print_fields_with_no_presence=True,
        preserving_proto_field_name=True,
        unquote_int64_if_possible=True,
    )
    _sort_maps(message, doc)
    return doc


def _sort_maps(message: Any, doc: dict[str, Any]) -> None:
    for name, is_map, nested in _map_paths(message.DESCRIPTOR):
        value = doc.get(name)
        if not value:
            continue
        if is_map:
            doc[name] = dict(sorted(value.items()))
        elif nested.is_repeated:
            for item, item_doc in zip(getattr(message, name), value, strict=True):
                _sort_maps(item, item_doc)
        else:
            _sort_maps(getattr(message, name), value)


_MAP_PATHS: dict[Any, tuple] = {}


def _map_paths(descriptor: Any) -> tuple:
    """The fields of messages of `descriptor` that hold a map, or a message that does (with the field
    itself as its third item), worked out once per message type."""
    paths = _MAP_PATHS.get(descriptor)
    if paths is None:
        _MAP_PATHS[descriptor] = ()  # a message type that holds itself adds nothing while it is worked out
        found = []
        for field in descriptor.fields:
            kind = field.message_type
            if kind is None or kind.full_name.startswith("google.protobuf."):
                continue  # a well-known type prints as a plain JSON value (a Struct as an object), its maps included
            if kind.GetOptions().map_entry:
                found.append((field.name, True, field))
            elif _map_paths(kind):
                found.append((field.name, False, field))
        paths = _MAP_PATHS[descriptor] = tuple(found)
    return paths


def dump_json(doc: Any) -> str:
    """`json.dumps(doc, indent=2, default=str)`, byte for byte, written without its pure-Python encoder.

    Python 3.11's C encoder does not indent, so an indented dump of `iris job list -o json`'s
    thousand jobs took about 21 ms; writing the same text from the C string escaper takes about a
    third of that. A document holding anything but dicts with string keys, lists, tuples, strings,
    ints, floats, booleans and None goes to `json.dumps` itself.
    """
    from json.encoder import encode_basestring_ascii  # the C escaper, where the interpreter has it

    out: list[str] = []
    try:
        _write_json(doc, "\n", out, encode_basestring_ascii, {})
    except _NotPlain:
        import json

        return json.dumps(doc, indent=2, sort_keys=False, default=str)
    return "".join(out)


class _NotPlain(Exception):
    """A value `_write_json` leaves to `json.dumps`."""


_CONSTANTS = {True: "true", False: "false", None: "null"}  # looked up by identity of value: 1 is not True here


def _write_json(value: Any, newline: str, out: list[str], quote: Any, keys: dict[str, str]) -> None:
    """Appends `value` as `json.dumps(indent=2)` writes it at the depth whose line start is `newline`;
    `keys` holds each key already written, quoted (a listing repeats the same keys a thousand times)."""
    kind = value.__class__
    if kind is dict:
        if not value:
            out.append("{}")
            return
        inner = newline + "  "
        sep = "{" + inner
        for key, item in value.items():
            name = keys.get(key)
            if name is None:
                if key.__class__ is not str:
                    raise _NotPlain()
                name = keys[key] = quote(key) + ": "
            # Strings, ints, constants and empty lists, most of a document, are written here rather
            # than by a call each.
            cls = item.__class__
            if cls is str:
                out.append(sep + name + quote(item))
            elif cls is int:
                out.append(sep + name + int.__repr__(item))
            elif cls is bool or item is None:
                out.append(sep + name + _CONSTANTS[item])
            elif cls is list and not item:
                out.append(sep + name + "[]")
            else:
                out.append(sep + name)
                _write_json(item, inner, out, quote, keys)
            sep = "," + inner
        out.append(newline + "}")
    elif kind is list or kind is tuple:
        if not value:
            out.append("[]")
            return
        inner = newline + "  "
        sep = "[" + inner
        for item in value:
            if item.__class__ is str:
                out.append(sep + quote(item))
            else:
                out.append(sep)
                _write_json(item, inner, out, quote, keys)
            sep = "," + inner
        out.append(newline + "]")
    elif kind is str:
        out.append(quote(value))
    elif kind is int:
        out.append(int.__repr__(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif kind is float:
        if value != value:
            out.append("NaN")
        elif value in (_INF, -_INF):
            out.append("Infinity" if value > 0 else "-Infinity")
        else:
            out.append(float.__repr__(value))
    else:
        raise _NotPlain()


_INF = float("inf")


def visible(text: str, keep: str = "") -> str:
    """`text` with its control characters (but those in `keep`) written as escapes (`\\n`, `\\x1b`).

    What one user typed (a region, a constraint value) reaches other users' tables through the
    reasons the controller writes; a newline there would forge rows, and an escape sequence would
    drive their terminal."""
    if not has_control(text):
        return text
    from iris.core.printable import CONTROL

    return CONTROL.sub(lambda m: m.group() if m.group() in keep else repr(m.group())[1:-1], text)


def has_control(text: str) -> bool:
    """Whether `text` holds a control character (C0, DEL or C1), as `iris.core.printable.CONTROL` matches.

    ASCII text holds one exactly when it is not printable, which `str.isprintable` answers in C;
    only other text is searched with the expression, so the common case imports no `re`."""
    if text.isascii():
        return not text.isprintable()
    from iris.core.printable import CONTROL

    return CONTROL.search(text) is not None


def render_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Left-aligned columns separated by two spaces; the last column is not padded. Control
    characters in a cell are shown as escapes, so no value can break a row or reach the terminal.

    A listing's table has thousands of cells: they are checked for control characters all at once
    (escaped one by one only when some cell holds one), and each line is written by one format."""
    head = [str(h) for h in headers]
    cells = [["" if c is None else c if c.__class__ is str else str(c) for c in row] for row in rows]
    if has_control("".join(["".join(row) for row in cells])):
        cells = [[visible(c) for c in row] for row in cells]
    cells.insert(0, head)
    n = len(head)
    if n == 0 or any(len(row) != n for row in cells):
        return _uneven_table(cells, n)
    widths = [max(map(len, column)) for column in zip(*cells)]
    line = "  ".join([f"{{:<{w}}}" if w else "{}" for w in widths[:-1]] + ["{}"])
    return "\n".join([line.format(*row).rstrip() for row in cells])


def _uneven_table(cells: list[list[str]], n: int) -> str:
    """`render_table`'s layout for rows whose cell counts differ from the headers'."""
    widths = [max(len(r[i]) for r in cells) for i in range(n)]
    lines = []
    for row in cells:
        parts = [c.ljust(widths[i]) if i < len(row) - 1 else c for i, c in enumerate(row)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def format_duration(seconds: float) -> str:
    """`45s`, `3m12s`, `2h05m`, `3d4h`: compact and exact enough to compare jobs."""
    if seconds < 0:
        seconds = 0
    if seconds < 10:
        if seconds < 1:
            return f"{seconds:.2f}s"
        return f"{seconds:.1f}s" if seconds != int(seconds) else f"{int(seconds)}s"
    total = int(round(seconds))
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h"


def format_age(ms: int, now_ms: int | None = None) -> str:
    """How long ago an epoch-milliseconds time was, in whole units (`3s`, `5m`, `2h`, `4d`)."""
    if not ms:
        return "-"
    now = int(time.time() * 1000) if now_ms is None else now_ms
    seconds = max(0, (now - ms) // 1000)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def format_time(ms: int) -> str:
    if not ms:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def format_resources(resources: Any) -> str:
    from iris.core.units import format_size

    parts = [f"cpu={resources.cpu:g}", f"memory={format_size(resources.memory_bytes)}"]
    if resources.disk_bytes:
        parts.append(f"disk={format_size(resources.disk_bytes)}")
    device = resources.device
    if device.kind in ("gpu", "tpu") and device.count:
        name = device.topology or f"{device.variant or 'any'}x{device.count}"
        parts.append(f"{device.kind}={name}")
    return " ".join(parts)


def format_constraint(c: Any) -> str:
    soft = " (preferred)" if c.preferred else ""
    if c.op in ("EXISTS", "NOT_EXISTS"):
        return f"{c.key} {c.op}{soft}"
    return f"{c.key} {c.op} {','.join(c.values)}{soft}"


def format_tasks(job: Any) -> str:
    """The TASKS column: `succeeded/total`, with what the rest are doing when not all are done."""
    counts = job.task_counts
    total = sum(counts.values()) or job.replicas
    done = counts.get("SUCCEEDED", 0)
    text = f"{done}/{total}"
    if done == total:
        return text
    others = [f"{n} {s.lower()}" for s, n in sorted(counts.items()) if s != "SUCCEEDED" and n]
    if others:
        text += " (" + ", ".join(others) + ")"
    return text


def job_reason(job: Any) -> str:
    """Why a job is where it is: the pending reason while it waits, else its error."""
    if job.state == "PENDING":
        return job.pending_reason or "waiting for the scheduler"
    return job.error


def expected_start(job: Any, now_ms: int) -> str:
    """A pending job's START cell: `in 3m` when soon, `~14:05` (local time) when later, `unknown`
    when the scheduler has no latest time for it (its reason says why); `-` for other states."""
    if job.state != "PENDING":
        return "-"
    latest = job.start_latest_ms
    if not latest:
        return "unknown"
    wait = max(0.0, (latest - now_ms) / 1000)
    if wait < 3600:
        return f"in {format_duration(wait)}" if wait >= 1 else "in <1s"
    return "~" + time.strftime("%H:%M", time.localtime(latest / 1000))


def start_interval(job: Any, now_ms: int) -> str:
    """The `Expected start` line of `job describe`: the interval and what it rests on."""
    if not job.start_basis:
        return "not estimated yet"
    earliest = format_time(job.start_earliest_ms)
    latest = format_time(job.start_latest_ms) if job.start_latest_ms else "unknown"
    return f"{expected_start(job, now_ms)}: not before {earliest}, at the latest {latest} ({job.start_basis})"


def jobs_table(jobs: Sequence[Any], now_ms: int | None = None) -> str:
    """The `job list` table. A page holds a thousand jobs, most alike in their task counts: each
    distinct TASKS cell is worked out once, and the ages all count from one reading of the clock."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    tasks: dict[tuple, str] = {}
    rows = []
    for j in jobs:
        counts = j.task_counts
        key = (j.replicas, *counts.items())
        cell = tasks.get(key)
        if cell is None:
            cell = tasks[key] = format_tasks(j)
        state = j.state
        reason = (j.pending_reason or "waiting for the scheduler") if state == "PENDING" else j.error
        start = expected_start(j, now) if state == "PENDING" else "-"
        rows.append((j.job_id, state, j.cluster or "-", cell, format_age(j.submitted_ms, now), start, reason))
    return render_table(("JOB", "STATE", "CLUSTER", "TASKS", "AGE", "START", "REASON"), rows)


def exit_text(message: Any) -> str:
    return str(message.exit_code) if message.has_exit_code else "-"


def run_time(started_ms: int, finished_ms: int, now_ms: int | None = None) -> str:
    if not started_ms:
        return "-"
    end = finished_ms or (int(time.time() * 1000) if now_ms is None else now_ms)
    return format_duration((end - started_ms) / 1000)


def describe_job(resp: Any, now_ms: int | None = None) -> str:
    """The `job describe` page: the job, its tasks, and each task's attempts."""
    job = resp.job
    fields: list[tuple[str, str]] = [
        ("Job", job.job_id),
        ("State", job.state),
        ("User", job.user or "-"),
        ("Cluster", job.cluster or "-"),
        ("Priority", job.priority or "interactive"),
        ("Command", " ".join(_quote(a) for a in job.command)),
        ("Resources", format_resources(job.resources)),
        ("Replicas", str(job.replicas)),
        ("Tasks", format_tasks(job)),
        ("Time limit", format_duration(job.timeout_s) if job.timeout_s > 0 else "none"),
    ]
    if job.constraints:
        fields.append(("Constraints", "; ".join(format_constraint(c) for c in job.constraints)))
    if job.parent_job_id:
        fields.append(("Parent", job.parent_job_id))
    if job.peer_id or job.handoff_state:
        fields.append(("Peer", f"{job.peer_id or '-'} ({job.handoff_state or 'no handoff'})"))
    fields += [
        ("Submitted", format_time(job.submitted_ms)),
        ("Started", format_time(job.started_ms)),
        ("Finished", format_time(job.finished_ms)),
        ("Run time", run_time(job.started_ms, job.finished_ms, now_ms)),
    ]
    if job.has_exit_code:
        fields.append(("Exit code", str(job.exit_code)))
    if job.state == "PENDING":
        fields.append(("Pending reason", job.pending_reason or "waiting for the scheduler"))
        now = int(time.time() * 1000) if now_ms is None else now_ms
        fields.append(("Expected start", start_interval(job, now)))
    if job.error:
        fields.append(("Error", job.error))
    if job.stale:
        fields.append(("Note", "state mirrored from a peer that has not reported recently"))
    width = max(len(k) for k, _ in fields) + 1
    out = [f"{(k + ':').ljust(width)}  {visible(v, keep=chr(10))}" for k, v in fields]
    if resp.tasks:
        out += ["", "Tasks:"]
        rows = [
            (
                t.task_id,
                t.state,
                t.attempt,
                t.backend_id or "-",
                t.worker_id or "-",
                exit_text(t),
                format_time(t.started_ms),
                run_time(t.started_ms, t.finished_ms, now_ms),
                t.error,
            )
            for t in resp.tasks
        ]
        out.append(
            _indent(
                render_table(
                    ("TASK", "STATE", "ATTEMPT", "BACKEND", "WORKER", "EXIT", "STARTED", "RUN TIME", "ERROR"), rows
                )
            )
        )
        attempts = [(t, a) for t in resp.tasks for a in t.attempts]
        if attempts:
            out += ["", "Attempts:"]
            rows = [
                (
                    a.attempt_id or _attempt_name(t.task_id, a.attempt),
                    a.state,
                    a.backend_id or "-",
                    a.worker_id or "-",
                    a.pid or "-",
                    exit_text(a),
                    format_time(a.started_ms),
                    run_time(a.started_ms, a.finished_ms, now_ms),
                    a.error,
                )
                for t, a in attempts
            ]
            out.append(
                _indent(
                    render_table(
                        ("ATTEMPT", "STATE", "BACKEND", "WORKER", "PID", "EXIT", "STARTED", "RUN TIME", "ERROR"), rows
                    )
                )
            )
            # The server sends each task's latest attempts; say where older ones were left out.
            earlier = [
                (t.task_id, t.attempts[0].attempt) for t in resp.tasks if t.attempts and t.attempts[0].attempt > 0
            ]
            if earlier:
                out.append(
                    "  (earlier attempts not shown: "
                    + ", ".join(f"{task} attempts 0-{n - 1}" for task, n in earlier[:5])
                    + (f", and {len(earlier) - 5} more tasks" if len(earlier) > 5 else "")
                    + ")"
                )
    return "\n".join(out)


def format_log_line(line: Any, *, show_task: bool, timestamps: bool, raw: bool = False) -> str:
    """One log line as printed. A job's text may hold escape sequences that would set the reader's
    window title or redraw their screen, so its control characters but tab are shown as escapes
    (`\\x1b`) unless `raw`. The stored text is unchanged: `-o json` and `--raw` print it exactly."""
    prefix = ""
    if timestamps:
        prefix += time.strftime("%H:%M:%S", time.localtime(line.ts_ms / 1000)) + f".{line.ts_ms % 1000:03d} "
    if show_task:
        prefix += f"[{line.task_index}] "
    if line.stream == "iris":
        prefix += "iris: "
    return prefix + (line.text if raw else visible(line.text, keep="\t"))


class AttemptMarks:
    """Where a task's output passes from one attempt to the next, in a stream of its log lines.

    `iris job run`, `job logs` and `job logs -f` print the same `--- task 0: attempt 1 (attempt 0
    ended) ---` line before the first line of a retry, so a reader sees where a run began again.
    """

    def __init__(self) -> None:
        self._seen: dict[int, int] = {}  # task index -> the attempt its last line came from

    def before(self, line: Any) -> str | None:
        previous = self._seen.get(line.task_index)
        self._seen[line.task_index] = line.attempt
        if previous is None or line.attempt == previous:
            return None
        return f"--- task {line.task_index}: attempt {line.attempt} (attempt {previous} ended) ---"


def write_log_line(line: Any, *, show_task: bool, timestamps: bool, raw: bool = False) -> None:
    """Task stdout to stdout; task stderr and the controller's own notes to stderr."""
    stream = sys.stdout if line.stream == "stdout" else sys.stderr
    stream.write(format_log_line(line, show_task=show_task, timestamps=timestamps, raw=raw) + "\n")
    stream.flush()


def explain_text(resp: Any) -> str:
    """`job explain` for people: the summary, then each reason once, as a table of worker groups
    when the answer has them, else as the answer's lines (a federated job's peers)."""
    out = [f"{resp.job_id}: {visible(resp.summary)}" if resp.summary else resp.job_id]
    if resp.groups:
        rows = [(g.backend_id, g.group, g.workers, g.verdict, "; ".join(g.reasons) or "-") for g in resp.groups]
        out += ["", render_table(("BACKEND", "WORKERS GROUP", "WORKERS", "VERDICT", "REASONS"), rows)]
    elif resp.lines:
        out += [""] + [visible(line) for line in resp.lines]
    return "\n".join(out)


def explain_document(resp: Any) -> dict[str, Any]:
    """`job explain -o json`: the answer, without its lines where they only repeat its groups in words."""
    doc = message_to_dict(resp)
    if resp.groups:
        doc.pop("lines", None)
    return doc


def query_rows(resp: Any) -> list[list[Any]]:
    """ExecuteRawQuery rows as plain Python lists (numbers, strings, None).

    A row travels as a protobuf ListValue, whose numbers are all doubles: a whole number (a count, an
    id, a time in ms) is given back as an int, as the table shows it, so `-o json` prints `3`, not `3.0`.
    """
    from google.protobuf import json_format

    rows: list[list[Any]] = [json_format.MessageToDict(row) for row in resp.rows]  # type: ignore[misc]  # a ListValue is a list
    return [[_whole(v) for v in row] for row in rows]


def _whole(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def query_table(resp: Any) -> str:
    rows = [["NULL" if v is None else _cell(v) for v in row] for row in query_rows(resp)]
    text = render_table(list(resp.columns), rows)
    if resp.truncated:
        text += f"\n(truncated to {len(rows)} rows)"
    return text


def cluster_status_text(url: str, info: Any, backends: Any, workers: Sequence[Any] = ()) -> str:
    """`iris cluster status`: who answers at `url`, what it holds, and each backend's capacity and use."""
    counts = ", ".join(f"{n} {s.lower()}" for s, n in sorted(info.job_counts.items())) or "none"
    health = "healthy" if info.healthy else "UNHEALTHY: " + "; ".join(info.problems)
    tick = f", last tick {info.last_tick_age_s:.1f}s ago" if info.last_tick_age_s >= 0 else ", no tick yet"
    out = [
        f"cluster {info.name} at {url}: {health}{tick}",
        f"  version {info.version} ({info.revision_date}), up {format_duration(info.uptime_s)}, pid {info.pid}",
        f"  state   {info.state_dir}",
        f"  jobs    {counts}",
        f"  peers   {info.peers}",
    ]
    if info.task_isolation_warning:
        out.append(f"  WARNING {visible(info.task_isolation_warning)}")
    if backends.backends:
        rows = []
        for b in backends.backends:
            mine = [w for w in workers if w.backend_id == b.id and w.alive]
            # A dead worker's capacity is not capacity: nothing is placed there. It is shown apart.
            dead = [w for w in workers if w.backend_id == b.id and not w.alive]
            used = sum(w.used.cpu for w in mine)
            total = sum(w.capacity.cpu for w in mine)
            tasks = sum(w.running_tasks for w in mine)
            use = f"cpu {_num(used)}/{_num(total)}, {tasks} task(s)" if mine else "-"
            if dead:
                use += f"; dead: {len(dead)} worker(s), cpu {_num(sum(w.capacity.cpu for w in dead))}, not counted"
            free = (
                ", ".join(
                    f"{token} {_num(amount)}/{_num(b.availability.total_amounts.get(token, 0))}"
                    for token, amount in sorted(b.availability.amounts.items())
                )
                if b.HasField("availability")
                else ""
            )
            per_worker = format_resources(b.worker_capacity) if b.HasField("worker_capacity") else "varies"
            live = f"{b.live_workers}/{b.workers}"
            rows.append((b.id, b.kind, live, per_worker, use, free or "-"))
        out += ["", render_table(("BACKEND", "KIND", "LIVE WORKERS", "PER WORKER", "IN USE", "FREE DEVICES"), rows)]
        out += [f"backend {b.id}: {visible(b.problem)}" for b in backends.backends if b.problem]
        out += worker_warnings(workers)
    if info.spend:
        out += ["", spend_table(info.spend)]
    return "\n".join(out)


def spend_table(spend: Sequence[Any]) -> str:
    """Per user, what their placed work outside the batch band is worth against their budget."""
    rows = [
        (
            s.user,
            str(s.spend),
            str(s.on_peers) if s.on_peers else "-",
            _num(s.budget) if s.HasField("budget") else "unlimited",
            "OVER: interactive work competes as batch" if s.over_budget else "within budget",
        )
        for s in spend
    ]
    return render_table(("USER", "SPEND", "ON PEERS", "BUDGET", "STATE"), rows)


def worker_table(workers: Sequence[Any], now_ms: int | None = None) -> str:
    """`iris worker list`: one row per worker with what it offers, runs, and when it last called in."""
    rows = []
    for w in workers:
        device = w.capacity.device
        devices = f"{device.kind}:{device.variant or 'any'}:{device.count}" if device.count else "-"
        attrs = ",".join(
            f"{k}={v}"
            for k, v in sorted(w.attributes.items())
            if k not in ("pool", "worker", "device-type", "gpu-count")
        )
        state = "alive" if w.alive else "dead"
        contact = format_age(w.last_contact_ms, now_ms) + " ago" if w.last_contact_ms else "-"
        rows.append((w.worker_id, w.backend_id, state, devices, attrs or "-", w.running_tasks, contact))
    if not rows:
        return "no workers"
    table = render_table(("WORKER", "BACKEND", "STATE", "DEVICES", "ATTRIBUTES", "TASKS", "LAST CONTACT"), rows)
    return "\n".join([table, *worker_warnings(workers)])


def worker_warnings(workers: Sequence[Any]) -> list[str]:
    """A WARNING line for each live worker daemon whose users' tasks are not isolated (not root)."""
    return [
        f"WARNING worker {visible(w.worker_id)} ({visible(w.backend_id)}): {visible(w.isolation_warning)}"
        for w in workers
        if w.alive and w.isolation_warning
    ]


def _num(value: float) -> str:
    return f"{value:g}"


def _cell(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _attempt_name(task_id: str, attempt: int) -> str:
    from iris.core.names import TaskName

    return str(TaskName.parse(task_id).attempt(attempt))


def _indent(text: str, by: str = "  ") -> str:
    return "\n".join(by + line for line in text.splitlines())


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)
