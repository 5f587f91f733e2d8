"""`iris worker …`: start a worker daemon on this host, and list a cluster's workers."""

from __future__ import annotations

from iris.cli import commands as cmd
from iris.cli.checks import size_with_unit
from iris.cli.main import EXIT_OK, CliContext, echo, output_option


@cmd.group()
def worker() -> None:
    """Turn this host into capacity for a cluster, and list workers."""


@worker.command("start")
@cmd.option(
    "--controller",
    "controller_url",
    metavar="URL",
    help="The controller to join (default: --controller / $IRIS_CONTROLLER).",
)
@cmd.option("--backend", required=True, metavar="ID", help="The `kind: workers` backend of the cluster to join.")
@cmd.option("--name", help="This worker's name in the pool (default: the host name).")
@cmd.option("--cpu", type=cmd.FloatRange(min=0, min_open=True), help="Cores to offer (default: all of this host's).")
@cmd.option(
    "--memory", metavar="SIZE", callback=size_with_unit, help="Memory to offer, e.g. 64G (default: this host's total)."
)
@cmd.option(
    "--disk",
    metavar="SIZE",
    callback=size_with_unit,
    help="Disk to offer, e.g. 500G (default: free space of --work-dir).",
)
@cmd.option("--devices", metavar="KIND:VARIANT:COUNT", help="Accelerators to offer, e.g. gpu:h100:8.")
@cmd.option(
    "--attr",
    "attrs",
    multiple=True,
    metavar="KEY=VALUE",
    help="An attribute to advertise (repeatable), e.g. zone=us-east5-a.",
)
@cmd.option("--work-dir", metavar="DIR", help="Where attempts' files live (default: ~/.iris/worker/NAME).")
@cmd.option(
    "--runtime",
    type=cmd.Choice(["process", "docker"]),
    default="process",
    show_default=True,
    help="process: attempts run as process groups; docker: jobs naming --image run in containers.",
)
@cmd.option(
    "--metrics-listen",
    metavar="HOST:PORT",
    help="Serve Prometheus /metrics there (e.g. 0.0.0.0:9101); default: listen on nothing.",
)
@cmd.option("-v", "--verbose", is_flag=True, help="Log every exchange with the controller.")
@output_option
@cmd.pass_obj
def start(
    obj: CliContext,
    controller_url: str | None,
    backend: str,
    name: str | None,
    cpu: float | None,
    memory: str | None,
    disk: str | None,
    devices: str | None,
    attrs: tuple[str, ...],
    work_dir: str | None,
    runtime: str,
    metrics_listen: str | None,
    verbose: bool,
) -> int:
    """Joins backend ID of a cluster and runs the attempts it is given, until stopped (SIGTERM).

    The worker dials the controller and never listens, so it may sit behind NAT. It keeps running
    its attempts while the controller is away and reconnects with back-off; stopping it stops its
    attempts, which the cluster then retries elsewhere. A worker token (`iris token create --role
    worker`) in --token or $IRIS_TOKEN authenticates it; without one only a trusted address may join.
    An https controller's certificate is checked against --ca / $IRIS_CA (else the system's store);
    one that does not verify stops the worker before it joins (exit 3).
    """
    import json
    import logging

    from iris.client.client import default_url
    from iris.client.tokens import token_for
    from iris.worker.daemon import WorkerDaemon
    from iris.worker.settings import host_settings

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from iris.core.printable import check_printable

    for flag, value in (("--name", name), ("--backend", backend), *(("--attr", attr) for attr in attrs)):
        if value is not None:  # shown in other users' worker lists and matched by their constraints
            check_printable(flag, value)
    url = controller_url or obj.controller_url() or default_url()
    import dataclasses

    settings = host_settings(
        url, backend, name, cpu, memory, disk, devices, attrs, work_dir, runtime, token_for(url, obj.token)
    )
    settings = dataclasses.replace(settings, tls=obj.tls_for(url))
    # One line, not the indented document of other commands: the daemon runs on, and a script
    # reading its stdout takes the first line as the sign that the worker has joined.
    on_joined = (lambda resp: echo(json.dumps(joined_doc(settings, resp)))) if obj.json else None
    daemon = WorkerDaemon(settings, on_joined=on_joined)
    daemon.install_signal_handlers()
    if metrics_listen:
        from iris.worker import metrics

        port = metrics.serve(daemon, metrics_listen)
        cmd.echo(f"worker {settings.name}: /metrics on {metrics_listen.rpartition(':')[0]}:{port}", err=True)
    cmd.echo(
        f"worker {settings.name} joining backend {backend} at {url} "
        f"({settings.capacity.describe()}, {runtime}, work dir {settings.work_dir})",
        err=True,
    )
    daemon.run()
    return EXIT_OK


def joined_doc(settings, resp) -> dict:  # (WorkerSettings, pb.RegisterWorkerResponse): imported lazily
    """What `worker start -o json` prints once the worker has joined: the worker as registered."""
    import os

    from iris.cli.output import message_to_dict
    from iris.rpc.codec import resources_to_proto

    return {
        "worker_id": resp.worker_id or settings.name,
        "backend_id": settings.backend,
        "controller": settings.controller,
        "capacity": message_to_dict(resources_to_proto(settings.capacity)),
        "attributes": dict(settings.attributes),
        "runtime": settings.runtime,
        "work_dir": str(settings.work_dir),
        "pid": os.getpid(),
        "grace_period_s": resp.grace_period_s,
    }


@worker.command("list")
@cmd.option("--backend", metavar="ID", help="Only this backend's workers.")
@cmd.option("--limit", type=cmd.IntRange(min=0), default=0, help="At most this many (0: every worker).")
@output_option
@cmd.pass_obj
def list_workers(obj: CliContext, backend: str | None, limit: int) -> int:
    """Lists each worker: backend, devices, attributes, running tasks and last contact.

    Every worker, by backend and worker id (fetched a page at a time), unless --limit says fewer.
    """
    from iris.cli.output import message_to_dict, worker_table
    from iris.cli.pages import collect, hint
    from iris.rpc import controller_pb2 as pb

    client = obj.client()
    got = collect(
        lambda token, size: client.call(
            "ListWorkers", pb.ListWorkersRequest(backend_id=backend or "", limit=size, page_token=token)
        ),
        "workers",
        limit,
        everything=not limit,
    )
    if obj.json:
        obj.emit({"workers": [message_to_dict(w) for w in got.rows], "total": got.total})
    else:
        cmd.echo(worker_table(got.rows))
    hint(got, "workers", "drop --limit for every one")
    return EXIT_OK
