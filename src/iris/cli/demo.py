"""`iris demo`: three throw-away clusters on loopback federate a few real jobs, then go away.

`marin` is a CPU-only parent; `cw-h100` and `cw-gb200` are its peers, whose local backends advertise
GPUs they do not have (the backend hands each task its CUDA_VISIBLE_DEVICES), so one laptop stands
in for three clusters. One real job walks through each routing decision of DESIGN §6: a CPU job runs
at home, a GPU job is placed on the peer with capacity, a pinned job goes where it is pinned, an
impossible job is rejected at submit, and a job running on a peer is cancelled from the parent. For
each the demo says where the job landed and why, in the controllers' own words: the disposition at
submit, every handoff state seen while watching it, the cluster that ran it (as that cluster reports
it), and its logs as relayed back to marin.

It drives only public surfaces: YAML configs, the key and token functions behind `iris cluster
public-key` and `iris token create`, controllers started the way `iris cluster start --detach`
starts them, and the SDK. Jobs go to marin with a user token minted by marin, because a tokenless
caller on the controller's host (its Unix socket) is local_admin and local_admin jobs never federate.

It ends by stopping the three controllers and checking that nothing it started is left: no process
whose command line or working directory lies in the demo's temporary folder (controllers, task
wrappers and what they ran), and none of the process ids it saw.
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iris.cli import commands as cmd
from iris.cli.main import CliContext, output_option
from iris.testing import free_port, leftovers, pid_alive, wait_until

PARENT = "marin"
PEER_GPUS = {"cw-h100": ("h100", 8), "cw-gb200": ("gb200", 4)}  # per worker; each peer has 2 workers
USER = "demo"
INTERVALS = {"tick_interval": "0.5s", "federation_heartbeat_interval": "0.5s", "federation_sync_interval": "0.5s"}
STEP_TIMEOUT_S = 20.0
POLL_S = 0.05

Echo = Callable[[str], None]


@dataclass(frozen=True)
class Step:
    """One demo job: what to submit to marin, and where and how it should end."""

    title: str
    name: str
    script: str
    options: dict[str, Any]
    expect_disposition: str  # local | queued | rejected: marin's answer at submit
    expect_state: str
    expect_cluster: str  # where it ends: the cluster that ran it (marin keeps a rejected job's record)
    expect_log: str = ""  # a line the logs on marin must contain


STEPS = (
    Step(
        "a CPU job runs at home",
        "cpu-hello",
        'echo "hello from $IRIS_CLUSTER: task $IRIS_TASK_INDEX of $IRIS_JOB_ID"',
        {"cpu": 1, "memory": "256M"},
        "local",
        "SUCCEEDED",
        PARENT,
        "hello from marin: task 0 of /demo/cpu-hello",
    ),
    Step(
        "an 8xH100 job goes to the peer with free H100s",
        "train-h100",
        'echo "training on $IRIS_CLUSTER with GPUs $CUDA_VISIBLE_DEVICES"; sleep 0.2; echo "step 100: loss 1.23"',
        {"cpu": 2, "memory": "1G", "gpu": "H100x8"},
        "queued",
        "SUCCEEDED",
        "cw-h100",
        "training on cw-h100 with GPUs 0,1,2,3,4,5,6,7",
    ),
    Step(
        "a job pinned with --target-cluster cw-gb200 goes there, though marin could run it",
        "pinned-eval",
        'echo "eval on $IRIS_CLUSTER"',
        {"cpu": 1, "memory": "256M", "target_cluster": "cw-gb200"},
        "queued",
        "SUCCEEDED",
        "cw-gb200",
        "eval on cw-gb200",
    ),
    Step(
        "a job no cluster can host is rejected at once",
        "needs-b300",
        "echo never runs",
        {"cpu": 1, "memory": "256M", "gpu": "B300x8"},
        "rejected",
        "UNSCHEDULABLE",
        PARENT,
    ),
)
CANCEL_STEP = Step(
    "a job running on a peer is cancelled from marin",
    "sleeper",
    'echo "sleeping on $IRIS_CLUSTER"; exec sleep 300',
    {"cpu": 1, "memory": "256M", "gpu": "H100x8"},
    "queued",
    "KILLED",
    "cw-h100",
)


@dataclass(frozen=True)
class Cluster:
    name: str
    config_path: Path
    config: Any  # ClusterConfig


# -- setting up -----------------------------------------------------------------------------------


def write_configs(workdir: Path) -> dict[str, Cluster]:
    """marin (CPU only, peered with both) and the two GPU peers (trusting marin's public key), each in its folder."""
    import yaml

    from iris.cli.token import cluster_signing_key
    from iris.controller.auth import public_key_pem
    from iris.core.config import load_config

    ports = {name: free_port() for name in (PARENT, *PEER_GPUS)}

    def write(name: str, backend: dict, **extra: Any) -> Cluster:
        backend = {"kind": "local", "workers": 2, **backend}
        doc = {
            "name": name,
            "listen": f"127.0.0.1:{ports[name]}",
            "state_dir": "state",
            "backends": [backend],
            **extra,
            "controller": INTERVALS,
        }
        path = workdir / name / "cluster.yaml"
        path.parent.mkdir(parents=True)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return Cluster(name, path, load_config(path))

    peers = {peer: {"address": f"http://127.0.0.1:{ports[peer]}"} for peer in PEER_GPUS}
    clusters = {
        PARENT: write(PARENT, {"id": "cpu", "capacity": {"cpu": 4, "memory": "8G", "disk": "10G"}}, peers=peers)
    }
    # What `iris cluster public-key --config marin/cluster.yaml` prints; marin's key is created here, before it starts.
    marin_key = public_key_pem(cluster_signing_key(clusters[PARENT].config))
    for name, (variant, count) in PEER_GPUS.items():
        backend = {
            "id": variant,
            "capacity": {"cpu": 8, "memory": "16G", "disk": "10G"},
            "devices": {"gpu": variant, "count": count},
        }
        clusters[name] = write(name, backend, auth={"federation_peers": {PARENT: marin_key}})
    return clusters


def start_all(clusters: dict[str, Cluster]) -> dict[str, int]:
    """Starts every controller at once (as `iris cluster start --detach`); their pids once each answers."""
    from iris.controller import process

    def start(c: Cluster) -> int:
        return process.start_detached(c.config, ["--config", str(c.config_path)], timeout=60)

    with ThreadPoolExecutor(len(clusters)) as pool:
        futures = {name: pool.submit(start, c) for name, c in clusters.items()}
        return {name: f.result() for name, f in futures.items()}


def stop_all(clusters: dict[str, Cluster]) -> dict[str, bool]:
    """Stops every controller at once (as `iris cluster stop`); whether each was running."""
    from iris.controller import process

    def stop(c: Cluster) -> bool:
        try:
            return process.stop(c.config)
        except ProcessLookupError:  # it exited between reading its pid file and the signal
            return True

    with ThreadPoolExecutor(len(clusters)) as pool:
        futures = {name: pool.submit(stop, c) for name, c in clusters.items()}
        return {name: f.result() for name, f in futures.items()}


def wait_for_peers(client, deadline_s: float) -> list:
    """marin's view of its peers once every one is reachable and reports its backends' availability."""
    deadline = time.monotonic() + deadline_s
    while True:
        peers = client.peers()
        if len(peers) == len(PEER_GPUS) and all(
            p.reachable and p.backends and all(b.HasField("availability") for b in p.backends) for p in peers
        ):
            return peers
        if time.monotonic() > deadline:
            errors = "; ".join(f"{p.peer_id}: {p.last_error or 'no backends yet'}" for p in peers if not p.reachable)
            raise TimeoutError(f"marin did not reach its peers within {deadline_s:g}s ({errors or 'no peers'})")
        time.sleep(POLL_S)


def availability_text(backend) -> str:
    a = backend.availability
    amounts = ", ".join(
        f"{token} {a.amounts.get(token, 0):g} free of {total:g}" for token, total in sorted(a.total_amounts.items())
    )
    return f"backend {backend.id}: {amounts or 'no devices'}"


# -- watching a job -------------------------------------------------------------------------------


def where(status) -> str:
    """Where a job is: the peer it is being handed to, or the cluster it is on (with its handoff state)."""
    handoff = status.handoff_state
    if handoff and status.state == "PENDING":
        return f"handoff {handoff} to {status.peer_id or 'a peer not yet chosen'}"
    return f"on {status.cluster or '-'}" + (f" (handoff {handoff})" if handoff else "")


def watch(
    client, job_id: str, done: Callable[[Any], bool], started: float, echo: Echo, timeout: float = STEP_TIMEOUT_S
):
    """Polls marin until `done(status)`, narrating every change of state, handoff state, cluster or reason."""
    timeline: list[dict] = []
    last = None
    deadline = time.monotonic() + timeout
    while True:
        status = client.status(job_id)
        seen = (status.state, status.handoff_state, status.cluster, status.peer_id, status.pending_reason, status.error)
        if seen != last:
            last = seen
            at = time.monotonic() - started
            exit_code = f", exit {status.exit_code}" if status.has_exit_code else ""
            why = status.pending_reason or status.error
            echo(
                f"   {f'+{at:.2f}s':>7}  {status.state:<13}  {where(status)}{exit_code}" + (f"  ({why})" if why else "")
            )
            timeline.append(
                {
                    "at_s": round(at, 3),
                    "state": status.state,
                    "handoff_state": status.handoff_state,
                    "cluster": status.cluster,
                    "peer_id": status.peer_id,
                    "reason": why,
                    "exit_code": status.exit_code if status.has_exit_code else None,
                }
            )
        if done(status):
            return status, timeline
        if time.monotonic() > deadline:
            raise TimeoutError(f"{job_id} is still {status.state} ({where(status)}) after {timeout:g}s")
        time.sleep(POLL_S)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str):
    return wait_until(predicate, timeout, POLL_S, what)


def why_text(step: Step, launched, peers_before: list) -> str:
    """Why marin routed the job as it did, from its disposition and what its peers advertised."""
    if launched.disposition == "local":
        return "marin has a backend that fits it, so it runs at home (disposition local)"
    if launched.disposition == "rejected":
        return "no backend on marin and no peer's advertised backends can host it, so marin refuses it at submit"
    if launched.peer_id:
        return (
            f"pinned with --target-cluster {launched.peer_id}: a pin wins over running at home "
            f"(disposition queued for {launched.peer_id})"
        )
    variant = (step.options.get("gpu") or "").lower().partition("x")[0]
    hosts = [
        f"{p.peer_id} ({availability_text(b)})"
        for p in peers_before
        for b in p.backends
        if b.attributes.get("device-variant") == variant
    ]
    return (
        f"no backend on marin has {variant or 'that shape'}; queued for a peer, and placement picks one "
        f"that reports free capacity: {', '.join(hosts) or 'none advertise it'}"
    )


def tasks_text(cluster_name: str, detail) -> tuple[list[str], list[dict], list[int]]:
    """Lines saying where each attempt ran, the same as a report, and the pids seen."""
    lines, rows, pids = [], [], []
    for task in detail.tasks:
        for a in task.attempts:
            code = f"exit {a.exit_code}" if a.has_exit_code else a.state.lower()
            lines.append(
                f"   ran on {cluster_name} (as {cluster_name} reports it): task {task.index} attempt {a.attempt} "
                f"on backend {a.backend_id}, worker {a.worker_id}, pid {a.pid or '-'}, {code}"
            )
            rows.append(
                {
                    "task": task.index,
                    "attempt": a.attempt,
                    "state": a.state,
                    "backend": a.backend_id,
                    "worker": a.worker_id,
                    "pid": a.pid,
                    "exit_code": a.exit_code if a.has_exit_code else None,
                }
            )
            if a.pid:
                pids.append(a.pid)
    return lines, rows, pids


def submit_line(step: Step) -> str:
    flags = []
    for key, value in step.options.items():
        flags += [f"--{key.replace('_', '-')}", str(value)]
    return f"iris job run {' '.join(flags)} --job-name {step.name} -- {shlex.quote(step.script)}"


def submit(marin, step: Step, echo: Echo):
    """Submits the step's job to marin and narrates its answer; (response, why, monotonic submit time)."""
    echo(f"   submit to marin: {submit_line(step)}")
    peers_before = marin.peers()
    started = time.monotonic()
    launched = marin.launch(step.script, name=step.name, user=USER, existing_job_policy="replace", **step.options)
    why = why_text(step, launched, peers_before)
    echo(
        f"   marin answers: {launched.job_id} {launched.state}, disposition {launched.disposition}"
        + (f" ({launched.message})" if launched.message else "")
    )
    echo(f"   why: {why}")
    return launched, why, started


def logs_once_they_show(marin, job_id: str, expected: str) -> list[str]:
    """The job's log lines on marin, once they include `expected` (a peer's lines arrive with its next sync)."""

    def lines() -> list[str] | None:
        texts = [line.text for line in marin.logs(job_id)]
        return texts if any(expected in text for text in texts) else None

    return wait_for(lines, 10, f"{job_id}'s logs on marin to show {expected!r}")


def run_step(marin, peers: dict, step: Step, echo: Echo, seen_pids: list[int]) -> dict:
    """Submits one job to marin, follows it to the end, shows where it ran and its relayed logs."""
    from iris.client.client import TERMINAL_STATES

    launched, why, started = submit(marin, step, echo)
    final, timeline = watch(marin, launched.job_id, lambda s: s.state in TERMINAL_STATES, started, echo)
    report: dict[str, Any] = {
        "title": step.title,
        "job_id": launched.job_id,
        "submitted_to": PARENT,
        "command": step.script,
        "options": step.options,
        "disposition": launched.disposition,
        "pinned_peer": launched.peer_id,
        "message": launched.message,
        "why": why,
        "timeline": timeline,
        "state": final.state,
        "cluster": final.cluster,
        "handoff_state": final.handoff_state,
        "peer_id": final.peer_id,
        "exit_code": final.exit_code if final.has_exit_code else None,
        "error": final.error,
        "expected": {
            "disposition": step.expect_disposition,
            "state": step.expect_state,
            "cluster": step.expect_cluster,
            "log": step.expect_log,
        },
    }
    ok = (launched.disposition, final.state, final.cluster) == (
        step.expect_disposition,
        step.expect_state,
        step.expect_cluster,
    )
    ran_on = peers.get(final.cluster, marin)
    lines, rows, pids = tasks_text(final.cluster, ran_on.describe(id_on(final.cluster, launched.job_id)))
    for line in lines:
        echo(line)
    if not rows:
        echo(f"   ran nowhere: no task was started; {final.cluster} keeps the job's record")
    seen_pids.extend(pids)
    report["ran_on"] = {"cluster": final.cluster if rows else "", "attempts": rows}
    lines, relayed_s = [], None
    if step.expect_log:
        lines = logs_once_they_show(marin, launched.job_id, step.expect_log)
        relayed_s = time.monotonic() - started
        where_from = "" if final.cluster == PARENT else f", relayed from {final.cluster} (+{relayed_s:.2f}s)"
        echo(f"   logs on marin{where_from}:")
        for text in lines:
            echo(f"     {text}")
    report["logs"] = lines
    report["logs_on_marin_after_s"] = None if relayed_s is None else round(relayed_s, 3)
    elapsed = time.monotonic() - started
    report["seconds"] = round(elapsed, 3)
    report["as_expected"] = ok
    landed = f"on {final.cluster}" if rows else "before running anywhere"
    echo(
        f"   {'as expected' if ok else 'NOT as expected'}: {launched.disposition}, {final.state} {landed}, "
        f"{elapsed:.2f}s after submit"
        + ("" if ok else f" (expected {step.expect_disposition}, {step.expect_state} on {step.expect_cluster})")
    )
    return report


def id_on(cluster: str, job_id: str) -> str:
    """The id marin's job `job_id` has on `cluster`: a peer files a job it receives under marin's namespace."""
    from iris.federation.ids import received_job_id

    return job_id if cluster == PARENT else received_job_id(PARENT, job_id)


def run_cancel_step(marin, peers: dict, step: Step, echo: Echo, seen_pids: list[int]) -> dict:
    """Starts a long job on a peer, cancels it on marin, and shows its process gone on the peer."""
    from iris.client.client import TERMINAL_STATES

    launched, why, started = submit(marin, step, echo)
    job_id = launched.job_id
    running, timeline = watch(marin, job_id, lambda s: s.state == "RUNNING" and s.cluster in peers, started, echo)
    peer = peers[running.cluster]

    peer_job_id = id_on(running.cluster, job_id)

    def peer_pid() -> int:
        tasks = peer.describe(peer_job_id).tasks
        return tasks[0].attempts[-1].pid if tasks and tasks[0].attempts else 0

    pid = wait_for(peer_pid, 10, f"{job_id}'s pid on {running.cluster}")
    seen_pids.append(pid)
    alive_before = pid_alive(pid)
    echo(f"   on {running.cluster} it runs as pid {pid} ({'alive' if alive_before else 'NOT alive'} in /proc)")
    echo(f"   cancel on marin: iris job stop {job_id}")
    cancelled = time.monotonic()
    marin.cancel(job_id, reason="cancelled by the demo")
    wait_for(lambda: not pid_alive(pid), 15, f"pid {pid} to exit on {running.cluster}")
    gone_s = time.monotonic() - cancelled
    echo(f"   pid {pid} on {running.cluster} is gone {gone_s:.2f}s after the cancel")
    peer_state = wait_for(
        lambda: (s := peer.status(peer_job_id).state) in TERMINAL_STATES and s,
        15,
        f"{job_id} to end on {running.cluster}",
    )
    final, more = watch(marin, job_id, lambda s: s.state in TERMINAL_STATES, started, echo)
    elapsed = time.monotonic() - started
    ok = (
        alive_before
        and launched.disposition == step.expect_disposition
        and final.state == step.expect_state
        and peer_state == "KILLED"
        and running.cluster == step.expect_cluster
    )
    echo(
        f"   {'as expected' if ok else 'NOT as expected'}: {final.state} on marin, {peer_state} on {running.cluster}, "
        f"process gone; {elapsed:.2f}s in all"
    )
    return {
        "title": step.title,
        "job_id": job_id,
        "submitted_to": PARENT,
        "command": step.script,
        "options": step.options,
        "disposition": launched.disposition,
        "why": why,
        "cluster": running.cluster,
        "timeline": timeline + more,
        "peer_pid": pid,
        "pid_alive_before_cancel": alive_before,
        "pid_gone_after_s": round(gone_s, 3),
        "peer_state": peer_state,
        "state": final.state,
        "error": final.error,
        "expected": {
            "disposition": step.expect_disposition,
            "state": step.expect_state,
            "cluster": step.expect_cluster,
        },
        "seconds": round(elapsed, 3),
        "as_expected": ok,
    }


# -- the demo -------------------------------------------------------------------------------------


def run_demo(echo: Echo = print) -> tuple[int, dict]:
    """Runs the federation demo, narrating through `echo`.

    Returns the exit code (0 when every job ended where and how it should and nothing is left
    running) and a report of what happened, which `iris -o json demo` prints as its one document.
    """
    from iris.cli.token import issue_token
    from iris.client.client import IrisClient

    began = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="iris-demo-"))
    # Passable (not listable) by others: tasks under uids of their own reach their folders inside it,
    # so no controller keeps its attempts in a folder of the temp folder that would outlive the demo.
    os.chmod(workdir, 0o711)
    report: dict[str, Any] = {"workdir": str(workdir), "clusters": [], "steps": []}
    clusters: dict[str, Cluster] = {}
    pids: dict[str, int] = {}
    seen_pids: list[int] = []
    ok = True
    echo(f"== three clusters on loopback, state in {workdir}")
    try:
        clusters = write_configs(workdir)
        pids = start_all(clusters)
        for name, c in clusters.items():
            if name == PARENT:
                role = f"parent, CPU only, peers: {', '.join(PEER_GPUS)}"
            else:
                variant, count = PEER_GPUS[name]
                role = f"peer, 2 workers x {count} {variant} (advertised), trusts marin's public key"
            echo(f"   {name:<9} {c.config.url:<24} pid {pids[name]:<7} {role}")
            report["clusters"].append(
                {"name": name, "url": c.config.url, "pid": pids[name], "role": role, "config": str(c.config_path)}
            )
        echo(f"   all three answering after {time.monotonic() - began:.2f}s")
        token = issue_token(clusters[PARENT].config, USER, "user", 3600)
        echo(
            f"   jobs go to marin as user '{USER}', with a token marin's key minted (`iris token create`): "
            "tokenless callers on this host are local_admin, whose jobs never federate"
        )
        with IrisClient(clusters[PARENT].config.url, token=token.token) as marin:
            peers = {name: IrisClient(clusters[name].config.url, token="") for name in PEER_GPUS}
            for peer in wait_for_peers(marin, 15):
                echo(f"   marin reaches {peer.peer_id}: " + "; ".join(availability_text(b) for b in peer.backends))
            echo(f"   federation ready after {time.monotonic() - began:.2f}s")
            for number, step in enumerate((*STEPS, CANCEL_STEP), start=1):
                echo("")
                echo(f"== {number}. {step.title}")
                run = run_cancel_step if step is CANCEL_STEP else run_step
                try:
                    outcome = run(marin, peers, step, echo, seen_pids)
                except Exception as exc:  # noqa: BLE001 - the demo reports it and goes on to the next step
                    echo(f"   NOT as expected: {type(exc).__name__}: {exc}")
                    outcome = {"title": step.title, "as_expected": False, "error": f"{type(exc).__name__}: {exc}"}
                report["steps"].append(outcome)
                ok &= outcome["as_expected"]
            for peer in peers.values():
                peer.close()
    except KeyboardInterrupt:
        echo("interrupted")
        ok = False
    except Exception as exc:  # noqa: BLE001 - setting up failed: say why, then clean up
        echo(f"   could not set up the clusters: {type(exc).__name__}: {exc}")
        report["error"] = f"{type(exc).__name__}: {exc}"
        ok = False
    finally:
        echo("")
        echo("== stopping the three controllers")
        stopping = time.monotonic()
        stopped = stop_all(clusters) if clusters else {}
        echo(
            f"   {', '.join(f'{n} (pid {pids[n]})' for n, s in stopped.items() if s) or 'none was running'} "
            f"stopped in {time.monotonic() - stopping:.2f}s"
        )
        left = leftovers(workdir, [*pids.values(), *seen_pids])
        report["stopped"] = stopped
        report["pids_seen"] = {"controllers": pids, "tasks": sorted(set(seen_pids))}
        report["left_running"] = left
        if left:
            ok = False
            for p in left:
                echo(f"   still running: pid {p['pid']}: {p['command']}")
        else:
            echo(
                f"   nothing the demo started is left running: checked /proc for its {len(pids)} controllers, "
                f"the {len(set(seen_pids))} task processes it saw, and anything else in {workdir}"
            )
        if ok:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            echo(f"   kept {workdir} for inspection (each cluster's controller.log is in <name>/state/)")
    elapsed = time.monotonic() - began
    echo("")
    echo(
        f"== demo finished in {elapsed:.1f}s: "
        + (
            "every job landed where it should, and nothing is left running"
            if ok
            else "something did not go as expected"
        )
    )
    report["seconds"] = round(elapsed, 3)
    report["ok"] = ok
    return (0 if ok else 1), report


@cmd.command("demo")
@output_option
@cmd.pass_obj
def demo(obj: CliContext) -> int:
    """Starts three throw-away clusters on loopback (a CPU parent, two GPU peers), shows a CPU job run at
    home, a GPU job handed to the peer with capacity, a pinned job, a rejected one and a cancel from
    the parent, with where each landed and why, then stops everything."""
    code, report = run_demo((lambda line: None) if obj.json else cmd.echo)
    if obj.json:
        obj.emit(report)
    return code
