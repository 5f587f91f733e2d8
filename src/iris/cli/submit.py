"""What `iris job run` does once its request is built: send it, print the job id, follow the job to its end.

`iris job run` (`iris.cli.job`) builds the request and hands it here. The protobuf messages are imported only when the job is followed (`--no-wait` never loads them).
"""

from __future__ import annotations

import time

from iris.cli.main import EXIT_FAILED, EXIT_OK, EXIT_REJECTED, CliContext, echo
from iris.core.errors import IrisError, Unauthenticated, Unavailable

PENDING_REMINDER_S = 30.0  # how often `job run` repeats a pending job's reason when it has not changed

# LaunchJobResponse fields: the name `job run -o json` prints (the proto's) and the Connect JSON name.
_LAUNCHED_FIELDS = (
    ("job_id", "jobId"),
    ("state", "state"),
    ("disposition", "disposition"),
    ("peer_id", "peerId"),
    ("message", "message"),
)
# Final job state -> exit code of `iris job run`.
STATE_EXIT_CODES = {"SUCCEEDED": EXIT_OK, "FAILED": EXIT_FAILED, "KILLED": EXIT_FAILED, "UNSCHEDULABLE": EXIT_REJECTED}


def launch_and_report(
    obj: CliContext,
    request: dict,
    *,
    no_wait: bool,
    timestamps: bool,
    started: float,
    cancel_on_interrupt: bool,
    raw: bool = False,
) -> int:
    """Sends a prepared LaunchJobRequest document, prints what `job run` prints, returns its exit code."""
    client = obj.client()
    bundle = client.bundle(request.get("bundle_id") or "")
    try:
        reply = client.launch_json(request)
    except IrisError as exc:
        return reject_exit(obj, exc)
    launched: dict = {field: str(reply.get(json_name, "")) for field, json_name in _LAUNCHED_FIELDS}
    job_id = launched["job_id"]
    uploaded = 0
    if bundle is not None:
        uploaded = int(reply.get("uploadedBytes", 0))
        launched["workspace"] = {
            "folder": bundle.root,
            "bundle_id": bundle.content_id,
            "files": bundle.files,
            "bytes": bundle.size,
            "uploaded_bytes": uploaded,
        }
    if not obj.json:
        echo(job_id)
        if bundle is not None:
            echo(_workspace_line(bundle, uploaded), err=True)
        if launched["disposition"] == "existing":
            then = "kept as it is" if no_wait else "following it"
            echo(f"job {job_id} already exists ({launched['state']}); {then}", err=True)
        elif launched["message"]:
            echo(launched["message"], err=True)
    if no_wait:
        if obj.json:
            obj.emit(launched)
        # A job refused at submit (no backend or peer can host it) has its outcome already.
        return EXIT_REJECTED if launched["disposition"] == "rejected" else EXIT_OK
    replicas = int(request.get("replicas") or 1)
    return _follow_to_end(obj, job_id, launched, timestamps, replicas, started, cancel_on_interrupt, raw)


def reject_exit(obj: CliContext, exc: IrisError) -> int:
    """The exit code of a submit (or its dry run) the controller answered with `exc`: 2, with the
    error printed, when it refuses the job (duplicate, stale client, bad constraint, …); raised
    (exit 3) when the error is not about the job (no answer, no valid token, a controller without
    the call)."""
    if isinstance(exc, (Unavailable, Unauthenticated)) or exc.code == "unimplemented":
        raise exc
    return _fail(obj, exc, EXIT_REJECTED)


def _workspace_line(bundle, uploaded: int) -> str:
    from iris.client.bundle import human_size

    sent = f"sent {human_size(uploaded)}" if uploaded else "already on the cluster, nothing sent"
    return f"workspace {bundle.root}: {bundle.files} file(s), {human_size(bundle.size)} ({sent})"


def _follow_to_end(
    obj: CliContext,
    job_id: str,
    launched: dict,
    timestamps: bool,
    replicas: int,
    started: float,
    cancel_on_interrupt: bool = False,
    raw: bool = False,
) -> int:
    from iris.cli.output import AttemptMarks, message_to_dict, write_log_line

    client = obj.client()
    lines = []
    watcher = None if obj.json else PendingWatcher(client, job_id, launched.get("message", ""))
    marks = AttemptMarks()
    try:
        for line in client.follow(job_id):
            if obj.json:
                lines.append(line)
                continue
            if watcher is not None:  # a line means it runs: no pending line may follow it
                watcher.stop()
            mark = marks.before(line)
            if mark is not None:
                echo(mark)
            write_log_line(line, show_task=replicas > 1, timestamps=timestamps, raw=raw)
        status = client.wait(job_id)
    except KeyboardInterrupt:
        if cancel_on_interrupt:
            client.cancel(job_id, reason="interrupted (Ctrl-C) in iris job run --cancel-on-interrupt")
            echo(f"\nstopped {job_id}", err=True)
        else:
            echo(f"\ndetached from {job_id}; it keeps running (stop it with `iris job stop {job_id}`)", err=True)
        if obj.json:  # still one document: what was launched, the lines seen, and how the command ended
            obj.emit(
                {
                    **launched,
                    "interrupted": "stopped" if cancel_on_interrupt else "detached",
                    "logs": [message_to_dict(line) for line in lines],
                }
            )
        return 130
    finally:
        if watcher is not None:
            watcher.stop()
    code = STATE_EXIT_CODES.get(status.state, EXIT_FAILED)
    if obj.json:
        obj.emit(
            {
                **launched,
                "state": status.state,
                "exit_code": status.exit_code if status.has_exit_code else None,
                "error": status.error,
                "status": message_to_dict(status),
                "logs": [message_to_dict(line) for line in lines],
            }
        )
        return code
    elapsed = time.monotonic() - started
    from iris.cli.output import visible

    # The error may quote text a person or a peer wrote (a stop reason): shown escaped, as job output is.
    detail = visible(status.error) or (f"exit code {status.exit_code}" if status.has_exit_code else "")
    echo(f"{job_id} {status.state}" + (f" ({detail})" if detail else "") + f" after {elapsed:.2f}s", err=True)
    return code


class PendingWatcher:
    """While a job waits, prints its pending reason to stderr when it changes, and every 30 s.

    It runs beside the log stream (a thread polling the job's status once a second) and ends as
    soon as the job leaves PENDING, so a job that starts at once costs one status call.
    """

    def __init__(self, client, job_id: str, shown: str = ""):
        import threading

        self._client = client
        self._job_id = job_id
        self._shown = shown  # `job run` already printed the submit answer's message
        self._stop = threading.Event()
        self._printing = threading.Lock()  # held while a line is printed, so stop() waits for it
        self._thread = threading.Thread(target=self._run, name="pending-reasons", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        began = last = time.monotonic()
        while not self._stop.wait(1.0):
            try:
                status = self._client.status(self._job_id)
            except IrisError:
                continue
            if status.state != "PENDING":
                return
            reason = status.pending_reason or "waiting to be scheduled"
            now = time.monotonic()
            with self._printing:
                if self._stop.is_set():  # the job's output began while this status call was out
                    return
                if reason != self._shown:
                    self._shown, last = reason, now
                    echo(f"pending: {reason}", err=True)
                elif now - last >= PENDING_REMINDER_S:
                    last = now
                    echo(f"still pending after {_duration(now - began)}: {reason}", err=True)

    def stop(self) -> None:
        """Stops it; once this returns it prints nothing more."""
        with self._printing:
            self._stop.set()


def _duration(seconds: float) -> str:
    from iris.cli.output import format_duration

    return format_duration(seconds)


def _fail(obj: CliContext, exc: IrisError, code: int) -> int:
    if obj.json:
        obj.emit({"error": {"code": exc.code, "message": exc.message}})
    echo(f"error: {exc.message}", err=True)
    return code
