"""`iris job stop|wait|history` and `job list --watch`: acting on many jobs, and watching them end.

Stopping by filter (`--user`, `--state`, `--prefix`) works as `scancel -u` does, with one guard:
past ten jobs it asks first (or needs `--yes` when nobody is at the terminal), because a filter
that matches more than meant is the usual way to lose a day of work. `history` is the `sacct`
summary: counts by state and run time over a window, computed from the jobs the controller lists.
"""

from __future__ import annotations

import sys
import time

from iris.cli import commands as cmd
from iris.cli.checks import job_state
from iris.cli.job import job
from iris.cli.main import EXIT_FAILED, EXIT_OK, EXIT_REJECTED, CliContext, exit_code_for, output_option
from iris.cli.submit import STATE_EXIT_CODES
from iris.cli.values import resolve_job
from iris.core.errors import IrisError, Unavailable
from iris.core.names import in_job_tree

TYPE_CHECKING = False  # typing's own constant costs `import typing` on `iris job run`, which imports this module
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

CONFIRM_ABOVE = 10
LIVE_STATES = ("PENDING", "RUNNING")
WATCH_INTERVAL_S = 2.0
WAIT_ONE_S = 10.0  # how long `job wait` lets the controller hold one call while a single job is left


def _matching(obj: CliContext, user: str | None, state: str | None, prefix: str | None) -> list[str]:
    """Ids of the live jobs the filters match, without those under another matched job (it stops them)."""
    states = state.split(",") if state else list(LIVE_STATES)
    ids = sorted({j.job_id for s in states for j in obj.client().iter_jobs(state=s, prefix=prefix, user=user)})
    roots: list[str] = []
    for job_id in ids:
        if not any(in_job_tree(job_id, r) for r in roots):
            roots.append(job_id)
    return roots


@job.command("stop")
@cmd.argument("job_ids", metavar="[JOB]...", nargs=-1)
@cmd.option("--user", help="Stop this user's live jobs.")
@cmd.option("--state", callback=job_state, help="Only jobs in this state: PENDING, RUNNING or PENDING,RUNNING.")
@cmd.option("--prefix", help="Only jobs whose id starts with this, e.g. /alice/sweep-.")
@cmd.option("-y", "--yes", is_flag=True, help=f"Stop more than {CONFIRM_ABOVE} jobs without asking.")
@cmd.option("--reason", default="", help="Recorded as the reason the job was stopped.")
@cmd.option(
    "--wait",
    "wait_ended",
    is_flag=True,
    help="Return only once each stopped job has ended (a job on a peer: once the peer confirms).",
)
@output_option
@cmd.pass_obj
def stop(
    obj: CliContext,
    job_ids: tuple[str, ...],
    user: str | None,
    state: str | None,
    prefix: str | None,
    yes: bool,
    reason: str,
    wait_ended: bool,
) -> int:
    """Stops jobs (ids, short names, or every live job the filters match) and every job below them.

    `iris job stop --user alice --state PENDING --prefix /alice/sweep-` stops alice's pending sweep
    jobs; past ten jobs it asks first (--yes skips the question).
    """
    filtered = bool(user or state or prefix)
    if job_ids and filtered:
        raise cmd.UsageError("give job ids or filters (--user, --state, --prefix), not both")
    if not job_ids and not filtered:
        raise cmd.UsageError("say which jobs: JOB... or filters such as --user U --state PENDING --prefix P")
    ended = [s for s in (state or "").split(",") if s and s not in LIVE_STATES]
    if ended:
        raise cmd.BadParameter(
            f"{ended[0]} jobs have ended already; stop PENDING or RUNNING ones", param_hint="--state"
        )
    targets = [resolve_job(obj, j) for j in job_ids] if job_ids else _matching(obj, user, state, prefix)
    if filtered:
        if not targets:
            if obj.json:
                obj.emit({"stopped": {}, "already_finished": {}, "errors": {}})
            else:
                cmd.echo("no live jobs match", err=True)
            return EXIT_OK
        if len(targets) > CONFIRM_ABOVE and not yes:
            if not sys.stdin.isatty():
                raise cmd.UsageError(
                    f"{len(targets)} jobs match; pass --yes to stop more than {CONFIRM_ABOVE} without being asked"
                )
            cmd.confirm(f"stop {len(targets)} jobs (and every job below them)?", abort=True, err=True)
        if not obj.json:
            cmd.echo(f"stopping {len(targets)} job(s)", err=True)
    return _stop_each(obj, targets, reason or "stopped with iris job stop", wait_ended)


def _stop_each(obj: CliContext, targets: list[str], reason: str, wait_ended: bool = False) -> int:
    client = obj.client()
    stopped: dict[str, list[str]] = {}
    finished: dict[str, str] = {}
    errors: dict[str, dict[str, str]] = {}
    code = EXIT_OK
    for job_id in targets:
        try:
            resp = client.cancel(job_id, reason=reason)
            if not resp.terminated:
                finished[job_id] = client.status(job_id).state
        except Unavailable:
            raise
        except IrisError as exc:
            errors[job_id] = {"code": exc.code, "message": exc.message}
            code = max(code, exit_code_for(exc))  # a job that names nothing is a usage error (3)
            if not obj.json:
                cmd.echo(f"error: {exc.message}", err=True)
            continue
        if job_id in finished:
            if not obj.json:
                cmd.echo(f"{job_id} had already finished ({finished[job_id]}); nothing to stop")
            continue
        stopped[job_id] = list(resp.terminated)
        if not obj.json:
            children = [j for j in resp.terminated if j != job_id]
            more = f" and {len(children)} job(s) below it" if children else ""
            cmd.echo(f"stopped {job_id}{more}")
    ended: dict[str, str] = {}
    if wait_ended:
        for job_id in stopped:
            status = client.status(job_id)
            if status.state not in STATE_EXIT_CODES and not obj.json:
                cmd.echo(f"{job_id}: {status.pending_reason or 'stopping'}", err=True)
            ended[job_id] = client.wait(job_id).state
            if not obj.json:
                cmd.echo(f"{job_id} {ended[job_id]}")
    if obj.json:
        out = {"stopped": stopped, "already_finished": finished, "errors": errors}
        obj.emit({**out, "ended": ended} if wait_ended else out)
    return code


@job.command("wait")
@cmd.argument("job_ids", metavar="JOB...", nargs=-1, required=True)
@cmd.option("--timeout", metavar="DURATION", help="Give up after this long (e.g. 30s, 2h); 0 (the default): no limit.")
@output_option
@cmd.pass_obj
def wait(obj: CliContext, job_ids: tuple[str, ...], timeout: str | None) -> int:
    """Waits until every JOB has ended, printing each as it ends; a job still waiting to start has
    its pending reason printed to stderr when it changes.

    Exit code: 0 all succeeded, 1 any failed or was killed (or the wait timed out), 2 any was
    unschedulable, 130 Ctrl-C (which stops the waiting only: the jobs keep running).
    """
    from iris.core.units import parse_duration

    try:
        limit = parse_duration(timeout) if timeout else None
    except IrisError as exc:
        raise cmd.BadParameter(exc.message, param_hint="--timeout") from None
    limit = limit or None  # 0 means no limit, as for `job run --timeout`
    client = obj.client()
    ids = [resolve_job(obj, j) for j in job_ids]
    began = time.monotonic()
    left = list(dict.fromkeys(ids))
    final: dict[str, object] = {}
    seen: dict[str, str] = {}
    said: dict[str, str] = {}  # the pending reason last printed per job
    delay = 0.05
    try:
        for job_id in left:
            client.status(job_id)  # an unknown job fails now, not after waiting for the others
        while left:
            for job_id in list(left):
                status = client.status(job_id)
                seen[job_id] = status.state
                if status.state == "PENDING" and not obj.json:  # say what it waits for, when that changes
                    reason = status.pending_reason or "waiting to be scheduled"
                    if said.get(job_id) != reason:
                        said[job_id] = reason
                        cmd.echo(f"{job_id} pending: {reason}", err=True)
                if status.state in STATE_EXIT_CODES:
                    final[job_id] = status
                    left.remove(job_id)
                    if not obj.json:
                        detail = status.error or (f"exit code {status.exit_code}" if status.has_exit_code else "")
                        cmd.echo(f"{job_id} {status.state}" + (f" ({detail})" if detail else ""))
            if not left:
                break
            if limit is not None and time.monotonic() - began > limit:
                return _timed_out(obj, final, left, timeout or "")
            # The controller holds the call while the first job left keeps its state, so its end is
            # seen at once (the others within a second); one too old to wait answers at once.
            wait_s = WAIT_ONE_S if len(left) == 1 else 1.0
            if limit is not None:
                wait_s = max(0.0, min(wait_s, limit - (time.monotonic() - began)))
            asked = time.monotonic()
            if client.status(left[0], wait_while=seen[left[0]], wait_s=wait_s).state == seen[left[0]]:
                if time.monotonic() - asked < wait_s / 2:
                    time.sleep(delay)
                    delay = min(delay * 1.5, 1.0)
    except KeyboardInterrupt:
        if left:  # else every job had ended already: report them as an uninterrupted wait would
            return _interrupted(obj, final, left)
    codes = [STATE_EXIT_CODES[s.state] for s in final.values()]  # type: ignore[attr-defined]
    if obj.json:
        from iris.cli.output import message_to_dict

        obj.emit({"jobs": {j: message_to_dict(s) for j, s in final.items()}})
    if EXIT_FAILED in codes:
        return EXIT_FAILED
    return EXIT_REJECTED if EXIT_REJECTED in codes else EXIT_OK


def _interrupted(obj: CliContext, final: dict, left: list[str]) -> int:
    """Ctrl-C in `job wait`: it stops waiting, never the jobs; says so, and how to look again."""
    if obj.json:  # one document, as `job run` prints when Ctrl-C detaches it
        from iris.cli.output import message_to_dict

        obj.emit(
            {
                "jobs": {j: message_to_dict(s) for j, s in final.items()},
                "still_running": left,
                "interrupted": "detached",
            }
        )
    ids = " ".join(left)
    cmd.echo(
        f"\nstopped waiting; {', '.join(left)} {'keeps' if len(left) == 1 else 'keep'} running"
        f" (wait again with `iris job wait {ids}`, or look with `iris job describe {left[0]}`)",
        err=True,
    )
    return 130


def _timed_out(obj: CliContext, final: dict, left: list[str], timeout: str) -> int:
    if obj.json:
        from iris.cli.output import message_to_dict

        obj.emit({"jobs": {j: message_to_dict(s) for j, s in final.items()}, "still_running": left})
    cmd.echo(f"error: still not finished after {timeout}: {', '.join(left)}", err=True)
    return EXIT_FAILED


@job.command("history")
@cmd.option("--since", default="1d", show_default=True, help="How far back: e.g. 6h, 1d, 7d.")
@cmd.option("--user", help="Only this user's jobs.")
@cmd.option("--prefix", help="Only jobs whose id starts with this.")
@output_option
@cmd.pass_obj
def history(obj: CliContext, since: str, user: str | None, prefix: str | None) -> int:
    """Summarises the jobs submitted in a window (like sacct): how many ended in each state, and run time."""
    from iris.cli.output import format_duration, render_table
    from iris.core.units import parse_duration

    try:
        window = parse_duration(since)
    except IrisError as exc:
        raise cmd.BadParameter(exc.message, param_hint="--since") from None
    now_ms = int(time.time() * 1000)
    cutoff = now_ms - int(window * 1000)
    by_state: dict[str, dict[str, float]] = {}
    for j in obj.client().iter_jobs(prefix=prefix, user=user):
        if j.submitted_ms < cutoff:
            continue
        row = by_state.setdefault(j.state, {"jobs": 0, "run_s": 0.0, "ran": 0})
        row["jobs"] += 1
        if j.started_ms:
            row["run_s"] += max(0, (j.finished_ms or now_ms) - j.started_ms) / 1000
            row["ran"] += 1
    total = sum(int(r["jobs"]) for r in by_state.values())
    if obj.json:
        obj.emit(
            {
                "since": since,
                "jobs": total,
                "states": {
                    s: {"jobs": int(r["jobs"]), "run_time_s": round(r["run_s"], 3)} for s, r in sorted(by_state.items())
                },
            }
        )
        return EXIT_OK
    if not total:
        cmd.echo(f"no jobs submitted in the last {since}", err=True)
        return EXIT_OK
    rows = [
        [
            state,
            int(r["jobs"]),
            format_duration(r["run_s"]) if r["ran"] else "-",
            format_duration(r["run_s"] / r["ran"]) if r["ran"] else "-",
        ]
        for state, r in sorted(by_state.items(), key=lambda kv: -kv[1]["jobs"])
    ]
    all_run = sum(r["run_s"] for r in by_state.values())
    rows.append(["TOTAL", total, format_duration(all_run), "-"])
    cmd.echo(f"jobs submitted in the last {since}" + (f" by {user}" if user else ""))
    cmd.echo(render_table(["STATE", "JOBS", "RUN TIME", "MEAN"], rows))
    return EXIT_OK


def watch_list(fetch: Callable[[], Sequence[Any]]) -> int:
    """Redraws `job list` (the jobs `fetch` returns) every two seconds until Ctrl-C (like `watch iris job list`)."""
    from iris.cli.output import jobs_table

    try:
        while True:
            jobs = fetch()
            if sys.stdout.isatty():
                cmd.clear()
            cmd.echo(f"every {WATCH_INTERVAL_S:g}s, {time.strftime('%H:%M:%S')} (Ctrl-C to stop)")
            cmd.echo(jobs_table(jobs) if jobs else "no jobs")
            cmd.echo("", nl=True)
            sys.stdout.flush()
            time.sleep(WATCH_INTERVAL_S)
    except KeyboardInterrupt:
        return EXIT_OK
