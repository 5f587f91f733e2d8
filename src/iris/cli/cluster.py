"""`iris cluster …`: start a controller (foreground or detached), stop it, and report its health.

The server modules (pydantic config, SQLAlchemy, uvicorn) are imported inside `start` and `stop`
only, so the job commands never pay for them.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

from iris.cli import commands as cmd
from iris.cli.main import EXIT_FAILED, EXIT_OK, CliContext, output_option
from iris.core.errors import IrisError


def config_options(fn):
    fn = cmd.option("--port", type=cmd.IntRange(1, 65535), help="With --local: the port (default 10000).")(fn)
    fn = cmd.option("--local", is_flag=True, help="The embedded single-machine cluster (state in $IRIS_HOME).")(fn)
    fn = cmd.option("--config", "config_path", metavar="FILE", help="The cluster's YAML config.")(fn)
    return fn


def resolve_config(obj: CliContext, config_path: str | None, local: bool, port: int | None):
    """The cluster config named by --config (here or global) or --local, with the argv that names it again."""
    from iris.core.config import load_config, local_config

    config_path = config_path or obj.config_path
    if not (config_path or local):
        named = _named_cluster(obj)
        if named is not None and named.config:
            config_path = named.config
        elif named is not None and named.name == "local":  # recorded by `cluster start --local`
            local, port = True, port or int(named.url.rpartition(":")[2])
    if config_path and local:
        raise cmd.UsageError("give --config FILE or --local, not both")
    if local:
        argv = ["--local"] + (["--port", str(port)] if port else [])
        return local_config(port=port or 10000), argv
    if config_path:
        if port:
            raise cmd.UsageError("--port goes with --local; set `listen:` in the config instead")
        path = os.path.abspath(config_path)
        return load_config(path), ["--config", path]
    raise cmd.UsageError(
        "say which cluster: --config cluster.yaml, --local for the embedded one, or --cluster NAME"
        " (`iris cluster list`; `iris cluster use NAME` sets a default)"
    )


def _named_cluster(obj: CliContext):  # -> NamedCluster | None
    """The named cluster a command means when it names none itself: --cluster NAME, else the
    default one (`iris cluster use`) unless --controller or $IRIS_CONTROLLER point elsewhere."""
    from iris.client.clusters import default_cluster, load

    if obj.cluster:
        return load().get(obj.cluster)
    named = default_cluster()
    elsewhere = obj.controller or os.environ.get("IRIS_CONTROLLER")
    if named is None or (elsewhere and elsewhere.rstrip("/") != named.url.rstrip("/")):
        return None
    return named


@cmd.group()
def cluster() -> None:
    """Start, stop and inspect a cluster's controller."""


@cluster.command("start")
@config_options
@cmd.option("--detach", is_flag=True, help="Run in the background; return once the controller answers.")
@cmd.option(
    "--remember/--no-remember",
    default=True,
    show_default=True,
    help="Record the cluster in ~/.iris/clusters.yaml, so `--cluster NAME` reaches it.",
)
@cmd.option(
    "--timeout",
    type=cmd.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="With --detach: seconds to wait for it to answer (0: no limit).",
)
@output_option
@cmd.pass_obj
def start(
    obj: CliContext,
    config_path: str | None,
    local: bool,
    port: int | None,
    detach: bool,
    remember: bool,
    timeout: float,
) -> int:
    """Runs the cluster's controller (in the foreground unless --detach)."""
    config, argv = resolve_config(obj, config_path, local, port)
    from iris.controller import process

    def remembered() -> None:
        if remember:
            _remember(config, config_path or obj.config_path)

    if not detach:
        if process.lock_held(config):  # before saying it serves: the running one does
            raise process.already_running(config, argv)
        taken = process.port_taken(config)
        if taken is not None:  # never "serving on" a port that another process holds
            raise taken
        if not obj.json:
            cmd.echo(
                f"cluster {config.name}: serving on {config.url}, state in {config.state_path} (Ctrl-C stops it)",
                err=True,
            )
            _warn_if_not_isolated(config)
        process.run_foreground(config, on_ready=remembered, argv=argv)
        return EXIT_OK
    pid = process.start_detached(config, argv, timeout=timeout)
    remembered()
    doc = {
        "cluster": config.name,
        "url": config.url,
        "pid": pid,
        "state_dir": str(config.state_path),
        "log": str(process.log_path(config)),
    }
    if obj.json:
        obj.emit(doc)
    else:
        cmd.echo(f"cluster {config.name} is up at {config.url} (pid {pid}); log: {doc['log']}")
        cmd.echo(f"  export IRIS_CONTROLLER={config.url}")
        _warn_if_not_isolated(config)
    return EXIT_OK


def _warn_if_not_isolated(config) -> None:
    """Says on stderr, at start, when this controller's users' tasks are not kept apart."""
    from iris.controller.auth.isolation import not_isolated_reason

    reason = not_isolated_reason(config.auth.task_uids.enabled)
    if reason:
        cmd.echo(f"warning: {reason}", err=True)


def _remember(config, config_path: str | None) -> None:
    """Adds the started cluster to ~/.iris/clusters.yaml, so `iris --cluster NAME` reaches it."""
    from iris.client.clusters import NamedCluster, remember

    try:
        remember(NamedCluster(config.name, config.url, os.path.abspath(config_path) if config_path else ""))
    except (OSError, IrisError) as exc:  # a read-only home must not fail a cluster that is up
        cmd.echo(f"warning: could not record cluster {config.name} in the cluster list: {exc}", err=True)


@cluster.command("list")
@cmd.option(
    "--timeout",
    type=cmd.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="Seconds to wait for each cluster's answer (0: no limit); one that answers later is shown as slow.",
)
@output_option
@cmd.pass_obj
def list_clusters(obj: CliContext, timeout: float) -> int:
    """Lists the named clusters (~/.iris/clusters.yaml), the default one, and which answer now.

    STATUS is up, slow (it answered after 2 s or more, or accepted the connection but gave no
    answer within --timeout: busy, or hung) or down (nothing accepts the connection, or what answers
    is not an Iris controller); ANSWER says how long it took, or why there was none.
    """
    from concurrent.futures import ThreadPoolExecutor

    from iris.client.clusters import clusters_file, load
    from iris.client.probe import probe_cluster

    named = load()
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda c: probe_cluster(c.url, timeout, obj.tls_for(c.url, c)), named.clusters))
    rows = [
        {
            "name": c.name,
            "url": c.url,
            "config": c.config,
            "default": c.name == named.default,
            "up": answer.answered_in_s is not None,
            "status": answer.status,
            "answered_in_s": answer.answered_in_s,
            "error": answer.error or None,
        }
        for c, answer in zip(named.clusters, answers)
    ]
    if obj.json:
        obj.emit({"file": clusters_file(), "default": named.default, "clusters": rows})
        return EXIT_OK
    if not rows:
        cmd.echo(f"no named clusters yet ({clusters_file()}); `iris cluster start` or `iris cluster add` adds one")
        return EXIT_OK
    from iris.cli.output import render_table

    cmd.echo(
        render_table(
            ["", "NAME", "URL", "STATUS", "CONFIG", "ANSWER"],
            [
                ["*" if r["default"] else "", r["name"], r["url"], r["status"], r["config"] or "-", _answer(r)]
                for r in rows
            ],
        )
    )
    return EXIT_OK


def _answer(row: dict) -> str:
    took = f"in {row['answered_in_s']:.1f}s" if row["answered_in_s"] is not None else ""
    return "; ".join(part for part in (took, row["error"] or "") if part) or "-"


@cluster.command("peers")
@output_option
@cmd.pass_obj
def peers(obj: CliContext) -> int:
    """Shows each federation peer, in both directions.

    Outbound (the `peers:` this cluster hands jobs to): whether it answers, its last error in plain
    words, and how old its capacity report is (a peer that stopped answering keeps its last, aging,
    figures). Inbound (the clusters that hand jobs to this one, from `auth.federation_peers` and
    the jobs held for them): when each last made a handoff or sync here, and its jobs not ended.
    """
    import time

    from iris.cli.output import format_age, message_to_dict, render_table
    from iris.federation.reasons import refuses

    client = obj.client()
    listed = client.peers()
    inbound = client.inbound_peers()
    now = int(time.time() * 1000)
    rows = []
    for p in listed:
        observed = [b.availability.observation_epoch_ms for b in p.backends if b.HasField("availability")]
        report_ms = max(observed) if observed else p.last_contact_ms
        status = "up" if p.reachable else ("refusing" if refuses(p.last_error) else "down")
        rows.append((p, status, report_ms))
    if obj.json:
        obj.emit(
            {
                "peers": [
                    {
                        **message_to_dict(p),
                        "direction": "outbound",
                        "status": status,
                        "capacity_report_age_s": (now - report_ms) / 1000 if report_ms else None,
                    }
                    for p, status, report_ms in rows
                ],
                "inbound": [
                    {
                        **message_to_dict(p),
                        "direction": "inbound",
                        "last_contact_age_s": (now - p.last_contact_ms) / 1000 if p.last_contact_ms else None,
                    }
                    for p in inbound
                ],
            }
        )
        return EXIT_OK
    if not rows and not inbound:
        cmd.echo(
            "this cluster has no federation peers: it sends to none (`peers:` in its config) and"
            " receives from none (`auth.federation_peers`)",
            err=True,
        )
        return EXIT_OK
    if rows:
        cmd.echo(
            render_table(
                ["PEER", "ADDRESS", "STATUS", "LAST ANSWER", "CAPACITY REPORT", "JOBS", "LAST ERROR"],
                [
                    [
                        p.peer_id,
                        p.address,
                        status,
                        format_age(p.last_contact_ms, now) + " ago" if p.last_contact_ms else "never",
                        format_age(report_ms, now) + " old" if report_ms else "none yet",
                        p.active_federated_jobs,
                        p.last_error or "-",
                    ]
                    for p, status, report_ms in rows
                ],
            )
        )
    if inbound:
        if rows:
            cmd.echo("")
        cmd.echo(
            render_table(
                ["INBOUND PEER", "TRUSTED", "LAST CONTACT", "JOBS"],
                [
                    [
                        p.peer_id,
                        "yes" if p.trusted else "no (only its jobs remain)",
                        f"{format_age(p.last_contact_ms, now)} ago ({p.last_call})"
                        if p.last_contact_ms
                        else "none since this controller started",
                        p.active_federated_jobs,
                    ]
                    for p in inbound
                ],
            )
        )
    return EXIT_OK


@cluster.command("use")
@cmd.argument("name")
@output_option
@cmd.pass_obj
def use_cluster(obj: CliContext, name: str) -> int:
    """Makes NAME the cluster every command talks to unless told otherwise."""
    from iris.client.clusters import use

    entry = use(name).get(name)
    if obj.json:
        obj.emit({"default": name, "url": entry.url})
    else:
        cmd.echo(f"default cluster is now {name} ({entry.url})")
    return EXIT_OK


def check_cluster_entry(name: str, url: str) -> None:
    """Refuses a name `--cluster NAME` could not be given as, or a URL no client could dial."""
    import re
    from urllib.parse import urlsplit

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", name):
        raise cmd.BadParameter(
            f"{name!r} cannot name a cluster: use letters, digits, '.', '_' or '-', starting with a letter or digit",
            param_hint="NAME",
        )
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or 0 < parts.port
    except ValueError:  # a port past 65535 or not a number
        parts, port_ok = None, False
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise cmd.BadParameter(
            f"{url!r} is not a controller URL: use http://HOST:PORT or https://HOST[:PORT]", param_hint="--url"
        )
    if any(c.isspace() for c in url):
        raise cmd.BadParameter(f"{url!r} has a blank in it; a controller URL has none", param_hint="--url")


@cluster.command("add")
@cmd.argument("name")
@cmd.option("--url", help="The controller's URL.")
@cmd.option("--config", "config_path", metavar="FILE", help="The cluster's YAML config (its URL is used).")
@cmd.option("--ca", metavar="FILE", help="PEM file of the CAs that may sign an https controller's certificate.")
@cmd.option("--client-cert", metavar="FILE", help="PEM client certificate, for a controller that asks for one.")
@cmd.option("--client-key", metavar="FILE", help="Its private key, when not in --client-cert's file.")
@cmd.option("--replace", is_flag=True, help="Replace the entry when NAME is already in the list.")
@output_option
@cmd.pass_obj
def add_cluster(
    obj: CliContext,
    name: str,
    url: str | None,
    config_path: str | None,
    ca: str | None,
    client_cert: str | None,
    client_key: str | None,
    replace: bool,
) -> int:
    """Adds a named cluster: by --url, or by --config for a cluster whose config is here.

    A NAME already in the list is refused (exit 3) unless --replace is given; `iris cluster remove
    NAME` drops it first otherwise. For an https controller whose certificate a private CA signed,
    --ca names that CA's certificate (kept as `ca:` in the entry).
    """
    from iris.client.clusters import NamedCluster, add

    if not url and not config_path:
        raise cmd.UsageError("give the cluster's --url URL or its --config FILE")
    if config_path:
        from iris.core.config import load_config

        url = url or load_config(config_path).url
        config_path = os.path.abspath(config_path)
    assert url is not None  # one of --url and --config was given
    check_cluster_entry(name, url)
    files = []
    for flag, path in (("--ca", ca), ("--client-cert", client_cert), ("--client-key", client_key)):
        if path and not os.path.isfile(path):
            raise cmd.BadParameter(f"{path!r} is not a file", param_hint=flag)
        files.append(os.path.abspath(path) if path else "")
    entry = NamedCluster(name, url.rstrip("/"), config_path or "", *files)
    previous = add(entry, replace=replace)
    if obj.json:
        changed = previous != entry
        was = {"url": previous.url, "config": previous.config} if previous is not None and changed else None
        obj.emit({"name": name, "url": entry.url, "config": entry.config, "changed": changed, "replaced": was})
    elif previous == entry:
        cmd.echo(f"cluster {name} ({entry.url}) is already in the list as given; nothing changed")
    elif previous is not None:
        cmd.echo(f"replaced cluster {name}: {previous.url} is now {entry.url}; use it with `iris --cluster {name} …`")
    else:
        cmd.echo(f"added cluster {name} ({entry.url}); use it with `iris --cluster {name} …`")
    return EXIT_OK


@cluster.command("remove")
@cmd.argument("name")
@output_option
@cmd.pass_obj
def remove_cluster(obj: CliContext, name: str) -> int:
    """Removes a named cluster from the list (the cluster itself is untouched)."""
    from iris.client.clusters import forget

    forget(name)
    if obj.json:
        obj.emit({"removed": name})
    else:
        cmd.echo(f"removed cluster {name} from the list")
    return EXIT_OK


@cluster.command("stop")
@config_options
@cmd.option(
    "--timeout",
    type=cmd.FloatRange(min=0),
    default=15.0,
    show_default=True,
    help="Seconds before it is killed (0: no limit, wait for it to exit).",
)
@output_option
@cmd.pass_obj
def stop(obj: CliContext, config_path: str | None, local: bool, port: int | None, timeout: float) -> int:
    """Stops the controller started for this config (its attempts are stopped with it)."""
    config, _ = resolve_config(obj, config_path, local, port)
    from iris.controller import process

    stopped = process.stop(config, timeout=timeout)
    if obj.json:
        obj.emit({"cluster": config.name, "stopped": stopped, "state_dir": str(config.state_path)})
    elif stopped:
        cmd.echo(f"stopped cluster {config.name}")
    else:
        cmd.echo(f"no controller was running for cluster {config.name} (state in {config.state_path})")
    return EXIT_OK


@cluster.command("status")
@config_options
@output_option
@cmd.pass_obj
def status(obj: CliContext, config_path: str | None, local: bool, port: int | None) -> int:
    """Reports whether the controller answers, what it runs, and its backends' free capacity.

    A backend's IN USE column counts its live workers only; dead ones are shown apart, not counted.
    """
    from iris.cli.output import cluster_status_text, message_to_dict

    if config_path or local:
        config, _ = resolve_config(obj, config_path, local, port)
        client = obj.client_for(config.url)
    else:
        client = obj.client()
    info = client.cluster_info()
    backends = client.backends()
    workers = client.workers()
    if obj.json:
        obj.emit(
            {
                "url": client.url,
                "healthy": info.healthy,
                "problems": list(info.problems),
                "cluster": message_to_dict(info),
                "backends": [message_to_dict(b) for b in backends.backends],
                "workers": [message_to_dict(w) for w in workers],
            }
        )
    else:
        cmd.echo(cluster_status_text(client.url, info, backends, workers))
    return EXIT_OK if info.healthy else EXIT_FAILED


@cluster.command("backup")
@config_options
@cmd.option("--to", "dest", metavar="FILE", required=True, help="The backup file to write (replaced whole).")
@output_option
@cmd.pass_obj
def backup(obj: CliContext, config_path: str | None, local: bool, port: int | None, dest: str) -> int:
    """Writes a consistent copy of the cluster's database and signing key to FILE.

    Safe while the controller runs: the database is copied with SQLite's online backup, one
    consistent snapshot holding every job acknowledged before it began. Run it on the controller's
    host, as the account that runs the controller (the file holds the key: it is written 0600).
    """
    from iris.controller import backup as backups

    config, _ = resolve_config(obj, config_path, local, port)
    info = backups.take(config, Path(dest))
    if obj.json:
        obj.emit({"file": os.path.abspath(dest), **asdict(info)})
    else:
        cmd.echo(
            f"backed up cluster {info.cluster} ({info.jobs} jobs, schema {info.schema_version}) to {os.path.abspath(dest)}"
        )
    return EXIT_OK


@cluster.command("restore")
@config_options
@cmd.option("--from", "source", metavar="FILE", required=True, help="A file `iris cluster backup` wrote.")
@cmd.option(
    "--force",
    is_flag=True,
    help="Restore over a state folder that holds a database (moved aside), or a backup of another cluster.",
)
@output_option
@cmd.pass_obj
def restore(obj: CliContext, config_path: str | None, local: bool, port: int | None, source: str, force: bool) -> int:
    """Puts a backup in place as the cluster's state; then `iris cluster start` runs it.

    The cluster must be stopped. Its jobs, logs, tokens' key and revocations come back as they were
    when the backup was taken; attempts that were running then are retried as lost ones.
    """
    from iris.controller import backup as backups

    config, argv = resolve_config(obj, config_path, local, port)
    info = backups.restore(config, Path(source), force=force)
    if obj.json:
        obj.emit({"state_dir": str(config.state_path), **asdict(info)})
    else:
        cmd.echo(
            f"restored cluster {info.cluster} ({info.jobs} jobs) into {config.state_path};"
            f" start it with `iris cluster start {' '.join(argv)}`"
        )
    return EXIT_OK


@cluster.command("public-key")
@config_options
@output_option
@cmd.pass_obj
def public_key(obj: CliContext, config_path: str | None, local: bool, port: int | None) -> int:
    """Prints the public half of the cluster's signing key (PEM): what a peer lists in auth.federation_peers.

    The key is created in the state directory when the cluster has none yet, so it can be printed
    (and given to peers) before the cluster first starts.
    """
    from iris.cli.token import cluster_signing_key
    from iris.controller.auth import key_id, public_key_pem

    config, _ = resolve_config(obj, config_path, local, port)
    key = cluster_signing_key(config)
    pem = public_key_pem(key)
    if obj.json:
        obj.emit({"cluster": config.name, "public_key": pem, "key_id": key_id(key)})
    else:
        cmd.echo(pem, nl=False)
    return EXIT_OK
