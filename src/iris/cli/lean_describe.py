"""Runs the common forms of `iris job describe` without click or protobuf, printing what the click command prints.

`iris job describe JOB` is what people run while a job misbehaves, and scripts poll it with
`-o json`; as its own process most of its time went to importing click and the protobuf runtime.
This module takes the command's forms (JOB, `--all-tasks`, `-o json`), fetches the job with the
same requests as `IrisClient.describe` (GetJobStatus with tasks and attempts, then ListTasks pages
for `--all-tasks`) in protobuf's binary encoding read by `iris.rpc.wire`, and prints through the
same `iris.cli.output.describe_job` and `iris.cli.pages.hint`; `-o json` prints the answer as
`message_to_dict` does (`iris.cli.lean_docs`). A short name resolves as the click command resolves
it (`iris.cli.values.resolve_job`).

Describing is read-only, so stepping aside is always safe: any error (an unknown job, a refused
token, an unreachable controller) and any answer it cannot read returns None before anything is
printed, and `iris.cli.main` runs the click command, which reports it as it always has.
"""

from __future__ import annotations

from iris.cli.main import CliContext

TYPE_CHECKING = False  # typing's own constant costs `import typing` on the lean paths
if TYPE_CHECKING:
    from typing import Any


def fetch(client: Any, job_id: str, all_tasks: bool) -> dict[str, Any]:
    """The GetJobStatusResponse `IrisClient.describe` returns, decoded by `iris.rpc.wire`."""
    from iris.rpc import wire

    request = {"job_id": job_id, "include_tasks": True, "include_attempts": True}
    data = client.call_bytes("GetJobStatus", wire.encode(wire.GET_JOB_STATUS_REQUEST, request))
    resp = wire.decode(data, wire.GET_JOB_STATUS_RESPONSE)
    token = resp.get("next_task_page_token", "")
    if not (all_tasks and token):
        return resp
    tasks = resp.setdefault("tasks", [])
    seen: set[str] = set()
    while True:
        request = {"job_id": job_id, "include_attempts": True, "page_token": token}
        page = wire.decode(
            client.call_bytes("ListTasks", wire.encode(wire.LIST_TASKS_REQUEST, request)), wire.LIST_TASKS_RESPONSE
        )
        items = page.get("tasks", [])
        tasks.extend(items)
        seen.add(token)
        token = page.get("next_page_token", "")
        if not token or not items:
            break
        if token in seen:
            raise wire.Unreadable("a page token came a second time")  # the click command reports it
    resp.pop("next_task_page_token")  # every task is here: as the SDK clears it
    return resp


def job_describe(obj: CliContext, job: str, all_tasks: bool) -> int | None:
    """`iris job describe` with the options `iris.cli.lean` read, or None when click must run it."""
    from iris.cli.main import echo
    from iris.cli.pages import Collected, hint
    from iris.cli.values import resolve_job
    from iris.rpc.wire import GET_JOB_STATUS_RESPONSE

    try:
        resp = fetch(obj.transport(), resolve_job(obj, job), all_tasks)
        if obj.json:
            from iris.cli.lean_docs import message_doc
            from iris.cli.output import dump_json

            text = dump_json(message_doc(resp, GET_JOB_STATUS_RESPONSE))
        else:
            from iris.cli.lean_docs import view
            from iris.cli.output import describe_job

            text = describe_job(view(resp, GET_JOB_STATUS_RESPONSE))
        got = Collected(resp.get("tasks", []), resp.get("total_tasks", 0), bool(resp.get("next_task_page_token")))
    except Exception:  # whatever it is, the click command reports it as it always has
        return None
    echo(text)
    hint(got, "tasks", "--all-tasks for every one")
    return 0
