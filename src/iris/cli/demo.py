"""`iris demo`: a throw-away local cluster runs a few real jobs, shows where and how each ran, and goes away.

It uses only public surfaces: a YAML config, `iris cluster start --detach` (through the same
process helpers), the SDK for the jobs, and `cluster stop`. What a person sees here is what they
would see driving a real cluster by hand.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import click

from iris.cli.main import CliContext, output_option

DEMO_JOBS = (
    {
        "title": "a job that succeeds",
        "name": "hello",
        "command": ["/bin/sh", "-c", 'echo "hello from task $IRIS_TASK_INDEX of $IRIS_JOB_ID on $(hostname)"; '
                    'echo "python $(python3 -c "import sys; print(sys.version.split()[0])")"'],
        "options": {"cpu": 1, "memory": "256M"},
        "expect": "SUCCEEDED",
    },
    {
        "title": "a job that fails",
        "name": "fails",
        "command": ["/bin/sh", "-c", 'echo "checking the input..."; echo "no such file: data.csv" >&2; exit 3'],
        "options": {"cpu": 0.5, "memory": "128M"},
        "expect": "FAILED",
    },
    {
        "title": "a job with 3 replicas",
        "name": "replicas",
        "command": ["/bin/sh", "-c", 'echo "replica $IRIS_TASK_INDEX starting"; sleep 0.2; echo "replica $IRIS_TASK_INDEX done"'],
        "options": {"cpu": 1, "memory": "256M", "replicas": 3},
        "expect": "SUCCEEDED",
    },
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def demo_config_text(port: int, state_dir: Path) -> str:
    return (
        "name: demo\n"
        f"listen: 127.0.0.1:{port}\n"
        f"state_dir: {state_dir}\n"
        "backends:\n"
        "  - id: cpu\n"
        "    kind: local\n"
        "    workers: 2\n"
        "    capacity: {cpu: 2, memory: 2G, disk: 10G}\n"
        "    attributes: {region: local, zone: local-a}\n"
        "controller: {tick_interval: 1s}\n"
    )


def run_demo(echo: Callable[[str], None] = print) -> tuple[int, dict]:
    """Runs the demo, narrating through `echo`.

    Returns the exit code (0 when every job ended as expected and the cluster shut down cleanly) and
    a report of what ran, which `iris -o json demo` prints as its one document.
    """
    from iris.client.client import IrisClient
    from iris.controller import process
    from iris.core.config import load_config

    workdir = Path(tempfile.mkdtemp(prefix="iris-demo-"))
    config_path = workdir / "cluster.yaml"
    config_path.write_text(demo_config_text(free_port(), workdir / "state"))
    config = load_config(config_path)
    ok = True
    pid = None
    report: dict = {"cluster": config.name, "url": config.url, "jobs": []}
    echo(f"== starting a throw-away cluster '{config.name}' at {config.url} (state in {config.state_path})")
    try:
        started = time.monotonic()
        pid = process.start_detached(config, ["--config", str(config_path)], timeout=60)
        _reap_when_done(pid)
        echo(f"   controller pid {pid}, answering after {time.monotonic() - started:.2f}s")
        echo("   config:")
        for line in config_path.read_text().splitlines():
            echo(f"     {line}")
        with IrisClient(config.url) as client:
            for spec in DEMO_JOBS:
                outcome = _run_one(client, spec, echo)
                report["jobs"].append(outcome)
                ok &= outcome["as_expected"]
    except KeyboardInterrupt:
        echo("interrupted")
        ok = False
    finally:
        echo("")
        echo(f"== stopping cluster '{config.name}'")
        process.stop(config)
        report["controller_pid"] = pid
        report["left_running"] = pid is not None and _alive(pid)
        if report["left_running"]:
            echo(f"   controller pid {pid} is still alive")
            ok = False
        else:
            echo("   controller stopped; no processes left behind")
        if ok:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            echo(f"   kept {workdir} for inspection (controller.log is in state/)")
    echo("")
    echo("== demo finished: " + ("every job ended as expected" if ok else "something did not go as expected"))
    report["ok"] = ok
    return (0 if ok else 1), report


def _run_one(client, spec: dict, echo: Callable[[str], None]) -> dict:
    """Submits one demo job, waits for it, narrates where and how it ran; returns what happened."""
    from iris.cli.output import format_log_line, format_resources, message_to_dict, run_time

    echo("")
    echo(f"== {spec['title']}: {' '.join(spec['command'][2:]) if spec['command'][:2] == ['/bin/sh', '-c'] else ' '.join(spec['command'])}")
    submitted = time.monotonic()
    job_id = client.submit(spec["command"], name=spec["name"], user="demo", existing_job_policy="replace", **spec["options"])
    status = client.wait(job_id, timeout=60)
    elapsed = time.monotonic() - submitted
    detail = client.describe(job_id)
    exit_code = f", exit code {status.exit_code}" if status.has_exit_code else ""
    echo(f"   {job_id}: {status.state}{exit_code} ({elapsed:.2f}s from submit to finished)")
    if status.error:
        echo(f"   why: {status.error}")
    echo(f"   asked for {format_resources(status.resources)} per task, {status.replicas} task(s)")
    for task in detail.tasks:
        for attempt in task.attempts:
            code = f"exit {attempt.exit_code}" if attempt.has_exit_code else attempt.state.lower()
            echo(
                f"   task {task.index} attempt {attempt.attempt}: {attempt.state} on backend {attempt.backend_id or '-'}, "
                f"worker {attempt.worker_id or '-'}, pid {attempt.pid or '-'}, {code}, "
                f"ran {run_time(attempt.started_ms, attempt.finished_ms)}"
            )
    echo("   logs:")
    lines = client.logs(job_id)
    for line in lines:
        echo("     " + format_log_line(line, show_task=status.replicas > 1, timestamps=False))
    return {
        "title": spec["title"],
        "job_id": job_id,
        "state": status.state,
        "expected": spec["expect"],
        "as_expected": status.state == spec["expect"],
        "seconds": round(elapsed, 3),
        "detail": message_to_dict(detail),
        "logs": [message_to_dict(line) for line in lines],
    }


def _reap_when_done(pid: int) -> None:
    """Collects the controller's exit status as soon as it exits.

    The controller is this process's child: unreaped, it would linger as a zombie that still
    answers `kill(pid, 0)`, and a stop that waits for it to vanish would wait its full timeout.
    """
    import threading

    def reap() -> None:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass  # already collected elsewhere

    threading.Thread(target=reap, name=f"reap-{pid}", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is gone for every purpose but the process table.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][:1] != "Z"
    except OSError:
        return True


@click.command("demo")
@output_option
@click.pass_obj
def demo(obj: CliContext) -> int:
    """Starts a throw-away local cluster, runs a job that succeeds, one that fails and one with
    replicas, shows where and how each ran with its logs, and shuts everything down."""
    code, report = run_demo((lambda line: None) if obj.json else click.echo)
    if obj.json:
        obj.emit(report)
    return code
