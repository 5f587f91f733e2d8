"""Decides which text a worker daemon's calls may carry: RegisterWorker, WorkerPoll (the heartbeat,
and the exits and output it reports) and FetchBundle.

A worker's name, backend, attribute keys and values end up in every user's `worker list`, in the
attributes constraints match on, and in the reasons the scheduler writes; its attempt ids, streams
and exit errors reach the tick and the database. `iris worker start` refuses a control character
in what it is given, but anyone holding a worker token (or a trusted address) may call the API
directly, so the controller checks every string field of these calls itself and refuses the whole
call with the field named: identifiers must be printable and short, an exit's error (free text
written by the daemon) may hold line breaks and tabs but no other control character, and is
bounded. Log bytes are the task's own output and are not text to check.

The limits live here, below both sides, so the daemon clips an error it reports to what the
controller takes (`clip_error`) and a well-behaved worker is never refused.
"""

from __future__ import annotations

import re

from iris.core.errors import InvalidArgument
from iris.core.printable import check_printable
from iris.rpc import controller_pb2 as pb

MAX_ID_CHARS = 256  # backend, session, boot and attempt ids, content ids
MAX_ATTRIBUTES = 64
MAX_ATTRIBUTE_KEY_CHARS = 63
MAX_ATTRIBUTE_VALUE_CHARS = 256
MAX_ERROR_CHARS = 4096
STREAMS = ("stdout", "stderr")
_ERROR_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # every control character but tab and newline


def check_short(what: str, value: str, where: str, max_chars: int = MAX_ID_CHARS, empty: bool = True) -> None:
    """Refuses an identifier that is too long, empty (unless `empty`) or holds a control character."""
    if len(value) > max_chars:
        raise InvalidArgument(
            f"{what} (field {where}) is {len(value)} characters long; at most {max_chars} are allowed"
        )
    if not value and not empty:
        raise InvalidArgument(f"{what} (field {where}) is empty")
    check_printable(what, value, where)


def check_error_text(value: str, where: str) -> None:
    """Refuses an exit's error text longer than `MAX_ERROR_CHARS` or holding a control character
    other than tab and newline."""
    if len(value) > MAX_ERROR_CHARS:
        raise InvalidArgument(
            f"the error of an exit (field {where}) is {len(value)} characters long; at most {MAX_ERROR_CHARS} are allowed"
        )
    if _ERROR_CONTROL.search(value) is not None:  # named as any control character is; tab and newline pass
        check_printable("the error of an exit", value.replace("\t", " ").replace("\n", " "), where)


def clip_error(text: str) -> str:
    """An error a daemon reports, made acceptable: other control characters shown as `?`, and cut
    to `MAX_ERROR_CHARS`."""
    text = _ERROR_CONTROL.sub("?", text)
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def check_registration(req: pb.RegisterWorkerRequest) -> None:
    """Refuses a RegisterWorkerRequest with a string field that is not short printable text."""
    check_short("backend", req.backend_id, "backend_id")
    check_short("worker name", req.name, "name")
    check_short("runtime", req.runtime, "runtime")
    check_short("boot id", req.boot_id, "boot_id")
    check_short("previous boot id", req.previous_boot_id, "previous_boot_id")
    check_short("isolation warning", req.isolation_warning, "isolation_warning", MAX_ERROR_CHARS)
    if len(req.attributes) > MAX_ATTRIBUTES:
        raise InvalidArgument(
            f"worker {req.name!r} advertises {len(req.attributes)} attributes; at most {MAX_ATTRIBUTES} are allowed"
        )
    for key in sorted(req.attributes):
        check_short("attribute key", key, "attributes", MAX_ATTRIBUTE_KEY_CHARS, empty=False)
        check_short(f"value of attribute {key!r}", req.attributes[key], f"attributes[{key}]", MAX_ATTRIBUTE_VALUE_CHARS)
    for i, attempt_id in enumerate(req.attempts):
        check_short("attempt id", attempt_id, f"attempts[{i}]")


def check_poll(req: pb.WorkerPollRequest) -> None:
    """Refuses a WorkerPollRequest (a heartbeat, or reports of output and exits) with a string
    field that is not short printable text, a stream that is not stdout or stderr, or an exit
    error that is too long or holds a control character other than tab and newline."""
    check_short("backend", req.backend_id, "backend_id")
    check_short("session", req.session, "session")
    for i, batch in enumerate(req.logs):
        check_short("attempt id", batch.attempt_id, f"logs[{i}].attempt_id")
        if batch.stream not in STREAMS:
            shown = repr(batch.stream[:40])
            raise InvalidArgument(f"stream {shown} (field logs[{i}].stream) is not one of: {', '.join(STREAMS)}")
    for i, ex in enumerate(req.exits):
        check_short("attempt id", ex.attempt_id, f"exits[{i}].attempt_id")
        check_error_text(ex.error, f"exits[{i}].error")


def check_fetch(req: pb.FetchBundleRequest) -> None:
    """Refuses a FetchBundleRequest whose ids are not short printable text."""
    check_short("backend", req.backend_id, "backend_id")
    check_short("session", req.session, "session")
    check_short("attempt id", req.attempt_id, "attempt_id")
    check_short("content id", req.content_id, "content_id")
