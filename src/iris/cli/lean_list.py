"""Runs the common forms of `iris job list` without click or protobuf, printing what the click command prints.

A listing is what people and scripts poll most, and as its own process most of its time went to
importing click and the protobuf runtime. This module reads the flags `iris job list` takes (but
not `--watch`, which stays with click), fetches the pages through the same `iris.cli.pages.collect`,
in protobuf's binary encoding read by `iris.rpc.wire` (why not Connect JSON: see that module), and
prints through the same `iris.cli.output.jobs_table` and `iris.cli.pages.hint`; `-o json` prints
each job as `message_to_dict` does (`iris.cli.lean_docs`).

A listing is read-only, so stepping aside is always safe: any flag or value this module does not
take, any error, and any answer it cannot read returns None before anything is printed, and
`iris.cli.main` runs the click command instead.
"""

from __future__ import annotations

from iris.cli.main import CliContext


class _Page:
    """One ListJobs answer, as `collect` reads a page: its jobs as views of the decoded messages."""

    def __init__(self, data: bytes):
        from iris.cli.lean_docs import views
        from iris.rpc.wire import JOB_STATUS, LIST_JOBS_RESPONSE, decode

        page = decode(data, LIST_JOBS_RESPONSE)
        self.jobs = views(page.get("jobs", ()), JOB_STATUS)
        self.next_page_token = page.get("next_page_token", "")
        self.total = page.get("total", 0)


def job_list(obj: CliContext, opts: dict) -> int | None:
    """`iris job list` with the options `iris.cli.lean` read, or None when click must run it."""
    from iris.cli.main import echo
    from iris.cli.pages import MAX_PAGE, collect, hint
    from iris.rpc.wire import LIST_JOBS_REQUEST, encode

    try:
        state = opts.get("state")
        if state is not None:
            from iris.cli.values import job_states_text

            state = job_states_text(state)  # what it refuses, click reports
        limit, page_size = int(opts.get("limit", "0")), int(opts.get("page_size", "0"))
        if limit < 0 or not 0 <= page_size <= MAX_PAGE or (limit and opts.get("everything")):
            return None
        prefix, user = opts.get("prefix"), opts.get("user")
        client = obj.transport()
        request = {"state": state, "prefix": prefix, "user": user}

        def fetch(token: str, size: int) -> _Page:
            return _Page(
                client.call_bytes(
                    "ListJobs", encode(LIST_JOBS_REQUEST, {**request, "limit": size, "page_token": token})
                )
            )

        got = collect(fetch, "jobs", limit, bool(opts.get("everything")), page_size)
        jobs = got.rows
        if obj.json:
            from iris.cli.lean_docs import message_doc
            from iris.cli.output import dump_json
            from iris.rpc.wire import JOB_STATUS

            text = dump_json({"jobs": [message_doc(job.__dict__, JOB_STATUS) for job in jobs], "total": got.total})
        elif jobs:
            from iris.cli.output import jobs_table

            text = jobs_table(jobs)
        else:
            text = None
    except Exception:  # whatever it is, the click command reports it as it always has
        return None
    if text is not None:
        echo(text)
    else:
        echo("no jobs" + (f" in state {state}" if state else "") + (f" under {prefix}" if prefix else ""), err=True)
    hint(got, "jobs")
    return 0
