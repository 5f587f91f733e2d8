"""`iris endpoint list|url`: the serving endpoints tasks registered, and capability URLs to reach them.

A URL is minted by the cluster that runs the job; when that cluster sits behind a public parent
(`federation_public_parent`) the URL already points at the parent, which relays it.
"""

from __future__ import annotations

from iris.cli import commands as cmd
from iris.cli.main import CliContext, output_option
from iris.cli.values import positive_duration


@cmd.group("endpoint")
def endpoint() -> None:
    """Serving endpoints registered by tasks (`IrisClient.register_endpoint`)."""


@endpoint.command("list")
@cmd.argument("job", required=False, default="")
@cmd.option("--limit", type=cmd.IntRange(min=0), default=0, help="At most this many (0: every live endpoint).")
@output_option
@cmd.pass_obj
def list_endpoints(obj: CliContext, job: str, limit: int) -> None:
    """Lists the live endpoints of JOB (of every job without one), by job and name."""
    from iris.cli.pages import collect, hint
    from iris.cli.values import resolve_job
    from iris.rpc import controller_pb2 as pb

    client = obj.client()
    job = resolve_job(obj, job) if job else ""
    got = collect(
        lambda token, size: client.call(
            "ListEndpoints", pb.ListEndpointsRequest(job_id=job, limit=size, page_token=token)
        ),
        "endpoints",
        limit,
        everything=not limit,
    )
    eps = got.rows
    if obj.json:
        obj.emit(
            {
                "endpoints": [
                    {"job_id": e.job_id, "name": e.name, "address": e.address, "attempt_id": e.attempt_id} for e in eps
                ],
                "total": got.total,
            }
        )
        hint(got, "endpoints", "drop --limit for every one")
        return
    if not eps:
        cmd.echo("no live endpoints" + (f" for {job}" if job else ""))
        return
    rows = [("JOB", "NAME", "ADDRESS", "ATTEMPT")] + [(e.job_id, e.name, e.address, e.attempt_id) for e in eps]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        cmd.echo("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=False)) + "  " + r[3])
    hint(got, "endpoints", "drop --limit for every one")


@endpoint.command("url")
@cmd.argument("job")
@cmd.argument("name")
@cmd.option(
    "--ttl",
    default="8h",
    show_default=True,
    callback=positive_duration,
    metavar="DURATION",
    help="How long the URL works (e.g. 30m, 8h, 2d; at most 30d).",
)
@output_option
@cmd.pass_obj
def url(obj: CliContext, job: str, name: str, ttl: float) -> None:
    """Mints a capability URL that reaches endpoint NAME of JOB until it expires.

    Anyone holding the URL reaches the endpoint: share it like a password.
    """
    from iris.cli.values import resolve_job

    resp = obj.client().endpoint_url(resolve_job(obj, job), name, ttl)
    if obj.json:
        obj.emit({"url": resp.url, "expires_ms": resp.expires_ms})
    else:
        cmd.echo(resp.url)
