"""What `iris job run --dry-run` prints: the controller's answer to PlanJob (what a submit of the
same request would meet now) in a few lines, or as one JSON document with `-o json`.

The exit code is the one a submit with `--no-wait` would give: 2 when the cluster would refuse the
job (the error the submit would print), 0 otherwise; and 2 for a job it would accept only to end
UNSCHEDULABLE at its first scheduling pass (what `job run` without `--no-wait` then exits with).
"""

from __future__ import annotations

import time

from iris.cli.main import EXIT_OK, EXIT_REJECTED, CliContext, echo
from iris.cli.submit import reject_exit
from iris.core.errors import IrisError


def plan_and_report(obj: CliContext, request: dict) -> int:
    """Sends a prepared LaunchJobRequest document to PlanJob, prints the answer, returns the exit code."""
    from iris.rpc import controller_pb2 as pb

    try:
        answer = obj.client().plan_request(pb.LaunchJobRequest(**request))
    except IrisError as exc:
        return reject_exit(obj, exc)
    refused = answer.disposition == "rejected" or bool(answer.unschedulable)
    if obj.json:
        from iris.cli.output import message_to_dict

        obj.emit(message_to_dict(answer))
    else:
        echo(f"{answer.job_id} (dry run: nothing was submitted)")
        for line in plan_lines(answer, int(time.time() * 1000)):
            echo(line)
        if answer.disposition == "rejected":
            echo(answer.message, err=True)  # what a submit prints of the refusal
    return EXIT_REJECTED if refused else EXIT_OK


def plan_lines(answer, now_ms: int) -> list[str]:
    """The human answer: where and when, what it would preempt, its band."""
    if answer.disposition == "existing":
        return [f"job {answer.job_id} already exists ({answer.state}); a submit would keep it as it is"]
    if answer.disposition == "rejected":
        return ["would be rejected: UNSCHEDULABLE"]
    lines = [_where(answer, now_ms)]
    if answer.disposition == "queued" and answer.start_basis:
        lines.append(f"expected start unknown ({answer.start_basis})")
    for p in answer.preemptions:
        lines.append(f"would preempt {p.job_id} (task {p.task_id} on {p.worker_id}, band {p.band})")
    lines.append(_band(answer))
    return lines


def _where(answer, now_ms: int) -> str:
    if answer.disposition == "queued":
        why = answer.route or answer.message
        if answer.peer_id:
            return (
                f"would go to peer {answer.peer_id} (backend {answer.peer_backend_id}): {why};"
                f" {answer.peer_id} reports room for it now"
                + (
                    f" ({answer.peer_reclaims:g} of its device held at lower bands would be preempted)"
                    if answer.peer_reclaims
                    else ""
                )
            )
        peers = ", ".join(answer.candidate_peers) or answer.pinned_peer
        return f"would wait queued for a federation peer: none reports room for it now (could host it: {peers}); {why}"
    if answer.unschedulable:
        return f"would end UNSCHEDULABLE: {answer.unschedulable}"
    backends = ", ".join(answer.backend_ids)
    if answer.starts_now:
        workers = ", ".join(dict.fromkeys(answer.worker_ids))
        return f"would run on backend {backends} now (worker {workers})"
    started = (
        f"{answer.tasks_placed} of its {answer.tasks} tasks would start now on backend {backends}; the rest "
        if answer.tasks_placed
        else ""
    )
    where = f" on backend {answer.reserved_backend_id}" if answer.reserved_backend_id else ""
    return f"{started}would wait{where}: {_start(answer, now_ms)}; {answer.pending_reason}"


def _start(answer, now_ms: int) -> str:
    """`expected start in 3m (14:05:10–14:20:00)`, or `expected start unknown`."""
    from iris.cli.output import format_duration

    latest = answer.start_latest_ms
    if not latest:
        return "expected start unknown"  # the reason after it says why
    wait = max(0.0, (latest - now_ms) / 1000)
    span = f"{_clock(answer.start_earliest_ms)}–{_clock(latest)}"
    return f"expected start in {format_duration(wait)} ({span})"


def _clock(ms: int) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ms / 1000))


def _band(answer) -> str:
    text = f"band: {answer.band}"
    notes = []
    if answer.band != answer.requested_band:
        notes.append(f"asked for {answer.requested_band}")
    if answer.HasField("budget"):
        state = "over budget, so it competes as batch" if answer.over_budget else "budget ok"
        notes.append(f"{state}: spend {answer.spend} of {answer.budget:g}")
    else:
        notes.append("no budget")
    text += f" ({'; '.join(notes)})"
    if answer.timeout_s:
        from iris.cli.output import format_duration

        text += f"; time limit {format_duration(answer.timeout_s)}"
    return text
