"""A controller with 100,000 finished jobs and 10,000 pending ones: memory, restart, list and
describe latency, the tick, and the database's size.

How the database is filled (figures printed, never asserted):
  1. a real controller (`python -m iris.controller`, a local backend of 2 workers × 1 cpu) runs one
     template job through the API (`echo` a line, to SUCCEEDED) and is stopped with SIGTERM;
  2. the fast path (`iris.testing.fill`) copies the template's rows --finished times in one SQLite
     transaction, changing only ids, user (10 users), insertion and times (spread over the past):
     the rows are the API's own, column by column (tests/testing/test_fill.py proves it);
  3. the controller starts again on that database; two `sleep` jobs fill both slots, then --pending
     more `sleep` jobs are submitted through the API (SDK, 4 threads) and wait behind them.

Then, on the filled controller:
  - restart: SIGTERM, wait for the exit, start again on the same database; the time from the new
    process's start until GetClusterInfo answers (median of --restarts);
  - RSS (VmRSS, peak VmHWM) once serving after the restart, and again after the runs below;
  - `IrisClient.list()` (the first page, as `iris job list` asks), list of PENDING jobs, and
    `IrisClient.describe(<a finished job>)`: the SDK call alone, p50/p99 over --runs calls, and
    the controller's CPU per call (its process's CPU over those calls, the tick's included);
  - `iris job list` and `iris job describe <id>`, each also with `-o json`, as fresh processes
    (from cached bytecode, as an installed `iris` runs), beside a bare `python -c pass`;
  - `IrisClient.list()` and `iris job list` again with a job submitted (untimed) before each call:
    a controller keeps a listing's answer until its database is next written, so these rows show
    what a listing costs on a cluster that is being written to;
  - the tick: GetClusterInfo's `last_tick_ms` (where the revision reports it) and the controller's
    CPU per second while only the tick runs (a 1 s tick interval, 10,000 pending, both slots busy);
  - the database on disk (controller.db with its -wal and -shm).

`--tree DIR` measures another checkout (e.g. the base revision at /work/wt/base, with its built
.venv): the bench re-runs itself under DIR/.venv/bin/python with DIR/src first on the path, so the
controller, the SDK and the CLI are that revision's; only the fast-path module is this tree's
(it needs nothing but sqlite3).

    .venv/bin/python bench/scale.py                 # 100,000 finished + 10,000 pending
    .venv/bin/python bench/scale.py --quick         # 10,000 + 1,000
    .venv/bin/python bench/scale.py --quick --tree /work/wt/base
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
USERS = 10
SLOTS = 2


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--finished", type=int, default=100_000, help="finished jobs (fast path)")
    p.add_argument("--pending", type=int, default=10_000, help="pending jobs (through the API)")
    p.add_argument("--quick", action="store_true", help="10,000 finished and 1,000 pending")
    p.add_argument("--runs", type=int, default=50, help="SDK calls per latency figure")
    p.add_argument("--cli-runs", type=int, default=10, help="CLI processes per latency figure")
    p.add_argument("--restarts", type=int, default=3)
    p.add_argument("--tree", type=Path, default=HERE, help="the checkout to measure (default: this one)")
    p.add_argument("--keep", action="store_true", help="keep the cluster's folder (printed)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    a = p.parse_args(argv)
    if a.quick:
        a.finished, a.pending = min(a.finished, 10_000), min(a.pending, 1_000)
    return a


def _reexec_under(tree: Path) -> None:
    """Runs this bench again under the measured tree's interpreter, with its src first on the path."""
    python = tree / ".venv" / "bin" / "python"
    if Path(sys.executable).absolute() != python.absolute() and os.environ.get("IRIS_SCALE_TREE") != str(tree):
        env = {**os.environ, "IRIS_SCALE_TREE": str(tree), "PYTHONPATH": str(tree / "src")}
        os.execve(str(python), [str(python), __file__, *sys.argv[1:]], env)
    sys.path.insert(0, str(tree / "src"))


def _fill_module():
    spec = importlib.util.spec_from_file_location("scale_fill", HERE / "src" / "iris" / "testing" / "fill.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["scale_fill"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def percentile(xs: list[float], p: float) -> float:
    if not xs:
        return math.nan
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


class Cluster:
    """One controller process on a free loopback port, started and stopped by its PID."""

    def __init__(self, base: Path, tree: Path):
        self.tree = tree
        self.dir = base / "scale"
        self.state = self.dir / "state"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        import yaml

        self.dir.mkdir(parents=True, exist_ok=True)
        config = {
            "name": "scale",
            "listen": f"127.0.0.1:{self.port}",
            "state_dir": str(self.state),
            "backends": [
                {"id": "cpu", "kind": "local", "workers": SLOTS, "capacity": {"cpu": 1, "memory": "8G", "disk": "10G"}}
            ],
            "controller": {"tick_interval": "1s"},
        }
        self.config = self.dir / "cluster.yaml"
        self.config.write_text(yaml.safe_dump(config, sort_keys=False))

    @property
    def db(self) -> Path:
        return self.state / "controller.db"

    def info(self, timeout: float = 2.0) -> dict | None:
        req = urllib.request.Request(
            self.url + "/iris.v1.ControllerService/GetClusterInfo",
            data=b"{}",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read() or b"{}")
        except (OSError, ValueError):
            return None

    def start(self, timeout: float = 120.0) -> float:
        """Starts the controller; returns seconds from the process's start until it answers."""
        t0 = time.perf_counter()
        with open(self.dir / "controller.log", "ab") as out:
            self.proc = subprocess.Popen(
                [str(self.tree / ".venv" / "bin" / "python"), "-m", "iris.controller", str(self.config)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
                env={**os.environ, "PYTHONPATH": str(self.tree / "src")},
            )
        while self.info(timeout=0.5) is None:
            if self.proc.poll() is not None or time.perf_counter() - t0 > timeout:
                self.stop()
                tail = (self.dir / "controller.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the controller did not start:\n{tail}")
            time.sleep(0.01)
        return time.perf_counter() - t0

    def stop(self) -> float:
        """SIGTERM by PID (SIGKILL after 60 s); returns seconds until it exited."""
        t0 = time.perf_counter()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._kill_attempts()
        return time.perf_counter() - t0

    def _kill_attempts(self) -> None:
        """Attempt processes a stopped controller left (the `sleep` jobs), by the pids in their folders."""
        import psutil

        for pid_file in self.state.rglob("pid"):
            try:
                pid = int(pid_file.read_text().split()[0])
                proc = psutil.Process(pid)
                if "IRIS_ATTEMPT_ID" in proc.environ():
                    os.killpg(pid, signal.SIGKILL)
            except (ValueError, OSError, psutil.Error):
                continue

    def status_kb(self) -> dict[str, int]:
        assert self.proc is not None
        out = {}
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    out[key] = int(value.split()[0])
        return out

    def cpu_s(self) -> float:
        import psutil

        assert self.proc is not None
        t = psutil.Process(self.proc.pid).cpu_times()
        return t.user + t.system

    def disk_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.state.glob("controller.db*"))


def timed(fn, runs: int, budget_s: float = 30.0, before=None) -> list[float]:
    """Milliseconds per call of `fn`, `runs` times (fewer, at least 3, when the calls outrun `budget_s`);
    with `before`, that is called (untimed) ahead of each call."""
    out: list[float] = []
    began = time.perf_counter()
    for i in range(runs):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
        if i >= 2 and time.perf_counter() - began > budget_s:
            break
    return out


def fill(cluster: Cluster, finished: int, pending: int) -> dict:
    from iris.client import IrisClient

    fill_mod = _fill_module()
    figures: dict = {}
    cluster.start()
    with IrisClient(cluster.url) as client:
        template = client.submit(["echo", "scale bench"], name="/u0/template", user="u0", cpu=1)
        client.wait(template, timeout=120)
    cluster.stop()
    t0 = time.perf_counter()
    step = 100  # ms between two copies' submits: 100,000 jobs span about three hours
    copies = [
        fill_mod.Copy(f"/u{n % USERS}/done-{n:06d}", f"u{n % USERS}", (finished - n) * step) for n in range(finished)
    ]
    fill_mod.copy_jobs(cluster.db, template, copies, template_user="u0")
    figures["fill_finished_s"] = time.perf_counter() - t0
    log(f"copied {finished:,} finished jobs in {figures['fill_finished_s']:.1f}s")
    cluster.start()
    with IrisClient(cluster.url) as client:
        for i in range(SLOTS):
            client.submit(["sleep", "100000"], name=f"/u0/busy-{i}", user="u0", cpu=1)
        deadline = time.monotonic() + 120
        while sum(1 for j in client.list(state="RUNNING") if j.job_id.startswith("/u0/busy-")) < SLOTS:
            if time.monotonic() > deadline:
                raise RuntimeError("the two slots did not fill")
            time.sleep(0.05)
    t0 = time.perf_counter()
    errors: list[BaseException] = []

    def submit_some(k: int) -> None:
        try:
            with IrisClient(cluster.url) as c:
                for n in range(k, pending, 4):
                    c.submit(["sleep", "100000"], name=f"/u{n % USERS}/wait-{n:06d}", user=f"u{n % USERS}", cpu=1)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=submit_some, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    figures["fill_pending_s"] = time.perf_counter() - t0
    figures["pending_submits_per_s"] = pending / figures["fill_pending_s"] if pending else math.nan
    log(f"submitted {pending:,} pending jobs in {figures['fill_pending_s']:.1f}s")
    return figures


# The CLI commands timed as fresh processes: figure name -> arguments, given a finished job's id.
CLI_ROWS = {
    "cli_list_ms": lambda job: ["job", "list"],
    "cli_list_json_ms": lambda job: ["job", "list", "-o", "json"],
    "cli_describe_ms": lambda job: ["job", "describe", job],
    "cli_describe_json_ms": lambda job: ["job", "describe", job, "-o", "json"],
}


def measure(cluster: Cluster, args: argparse.Namespace) -> dict:
    from iris.client import IrisClient

    figures: dict = {}
    stops, starts = [], []
    for _ in range(args.restarts):
        stops.append(cluster.stop())
        starts.append(cluster.start())
    figures["stop_s"] = statistics.median(stops)
    figures["restart_to_serving_s"] = statistics.median(starts)
    figures["restart_to_serving_all_s"] = starts
    time.sleep(2.0)  # let the first passes of the tick run after the start
    figures["rss_after_start_kb"] = cluster.status_kb()
    some_job = f"/u1/done-{args.finished // 2 + 1:06d}" if args.finished else "/u0/template"
    # The CLI's processes run as an installed `iris` does, from cached bytecode: where the
    # environment says not to write it (PYTHONDONTWRITEBYTECODE), every run would compile the CLI's
    # modules again (15 ms or more). The cache goes to a folder of the bench's, not into the tree.
    env = {**os.environ, "IRIS_CONTROLLER": cluster.url, "PYTHONPATH": str(args.tree / "src")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(cluster.dir / "pycache")
    iris = str(args.tree / ".venv" / "bin" / "iris")
    py = str(args.tree / ".venv" / "bin" / "python")

    def run(cmd: list[str]) -> None:
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)

    with IrisClient(cluster.url) as client:
        first = client.list()
        figures["list_page_jobs"] = len(first)
        sdk_calls = {
            "sdk_list_ms": lambda: client.list(),
            "sdk_list_pending_ms": lambda: client.list(state="PENDING"),
            "sdk_list_user_ms": lambda: client.list(user="u3"),
            "sdk_describe_ms": lambda: client.describe(some_job),
        }
        for key, call in sdk_calls.items():
            # The controller's own CPU per call beside the wall time: on a host shared with other
            # work the wall time says as much about the neighbours as about the controller.
            c0 = cluster.cpu_s()
            figures[key] = timed(call, args.runs)
            figures[key.replace("_ms", "_cpu_ms")] = (cluster.cpu_s() - c0) * 1000 / len(figures[key])
        # A controller keeps a listing's answer until its database is next written: on a busy
        # cluster most listings come after a write. These rows submit a job before each call.
        pokes = iter(range(10**9))

        def write() -> None:
            client.submit(["sleep", "100000"], name=f"/u9/poke-{next(pokes):06d}", user="u9", cpu=1)

        figures["sdk_list_written_ms"] = timed(client.list, args.runs, before=write)

        # A Prometheus scrape of /metrics (revisions before it have none: the row says so).
        def scrape() -> None:
            with urllib.request.urlopen(f"{cluster.url}/metrics", timeout=10) as answer:
                figures["metrics_bytes"] = len(answer.read())

        try:
            scrape()
        except OSError:
            figures["metrics_ms"] = []
        else:
            c0 = cluster.cpu_s()
            figures["metrics_ms"] = timed(scrape, args.runs)
            figures["metrics_cpu_ms"] = (cluster.cpu_s() - c0) * 1000 / len(figures["metrics_ms"])
        figures["python_pass_ms"] = timed(lambda: run([py, "-c", "pass"]), args.cli_runs)
        for cli_args in CLI_ROWS.values():  # fill the bytecode cache
            run([iris, *cli_args(some_job)])
        for key, cli_args in CLI_ROWS.items():
            figures[key] = timed(lambda cli_args=cli_args: run([iris, *cli_args(some_job)]), args.cli_runs)
        figures["cli_list_written_ms"] = timed(lambda: run([iris, "job", "list"]), args.cli_runs, before=write)
        figures["rss_after_runs_kb"] = cluster.status_kb()
        info = client.cluster_info()
        figures["job_counts"] = dict(info.job_counts)
        last_tick = getattr(info, "last_tick_ms", None)
        figures["last_tick_ms"] = last_tick if last_tick else math.nan
    c0, t0 = cluster.cpu_s(), time.perf_counter()
    time.sleep(5.0)
    figures["idle_cpu_per_s"] = (cluster.cpu_s() - c0) / (time.perf_counter() - t0)
    figures["db_bytes"] = cluster.disk_bytes()
    return figures


def report(args: argparse.Namespace, fills: dict, figures: dict) -> None:
    def pp(key: str) -> str:
        xs = figures[key]
        line = f"p50 {percentile(xs, 50):8.1f} ms   p99 {percentile(xs, 99):8.1f} ms   (n={len(xs)})"
        cpu = figures.get(key.replace("_ms", "_cpu_ms"))
        return line if cpu is None else f"{line}   controller CPU {cpu:.1f} ms/call"

    py = percentile(figures["python_pass_ms"], 50)
    rows = [
        ("revision", _revision(args.tree)),
        ("jobs", ", ".join(f"{n:,} {s.lower()}" for s, n in sorted(figures["job_counts"].items()))),
        ("fill: fast path, finished", f"{fills['fill_finished_s']:.1f} s"),
        ("fill: API, pending", f"{fills['fill_pending_s']:.1f} s ({fills['pending_submits_per_s']:.0f} jobs/s)"),
        ("RSS after start", _rss(figures["rss_after_start_kb"])),
        ("RSS after list/describe", _rss(figures["rss_after_runs_kb"])),
        ("stop (SIGTERM → exit)", f"{figures['stop_s']:.2f} s"),
        ("restart → serving", f"{figures['restart_to_serving_s']:.2f} s (median of {args.restarts})"),
        (f"SDK list() ({figures['list_page_jobs']} jobs)", pp("sdk_list_ms")),
        ("SDK list(state=PENDING)", pp("sdk_list_pending_ms")),
        ("SDK list(user=u3)", pp("sdk_list_user_ms")),
        ("SDK describe(job)", pp("sdk_describe_ms")),
        ("SDK list(), a submit before each", pp("sdk_list_written_ms")),
        (
            "GET /metrics (a scrape)",
            f"{pp('metrics_ms')}   {figures.get('metrics_bytes', 0):,} bytes"
            if figures["metrics_ms"]
            else "not served by this revision",
        ),
        ("python -c pass", pp("python_pass_ms")),
        *(
            (
                f"iris {' '.join(CLI_ROWS[key]('JOB'))} (process)",
                pp(key) + f"   {percentile(figures[key], 50) / py:.1f}× python",
            )
            for key in CLI_ROWS
        ),
        (
            "iris job list, a submit before each",
            pp("cli_list_written_ms") + f"   {percentile(figures['cli_list_written_ms'], 50) / py:.1f}× python",
        ),
        (
            "tick (last pass)",
            "not reported by this revision"
            if math.isnan(figures["last_tick_ms"])
            else f"{figures['last_tick_ms']:.1f} ms",
        ),
        ("controller CPU while idle", f"{figures['idle_cpu_per_s'] * 1000:.0f} ms per second (tick every 1 s)"),
        ("database on disk", f"{figures['db_bytes'] / 2**20:.1f} MiB"),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k.ljust(width)}  {v}")


def _rss(kb: dict[str, int]) -> str:
    return f"{kb.get('VmRSS', 0) / 1024:.0f} MB (peak {kb.get('VmHWM', 0) / 1024:.0f} MB)"


def _revision(tree: Path) -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True)
        return f"{out.stdout.strip()} ({tree})"
    except OSError:
        return str(tree)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    args.tree = args.tree.resolve()
    _reexec_under(args.tree)
    base = Path(tempfile.mkdtemp(prefix="iris-scale-"))
    cluster = Cluster(base, args.tree)
    try:
        log(f"filling {args.finished:,} finished and {args.pending:,} pending jobs under {base}")
        fills = fill(cluster, args.finished, args.pending)
        figures = measure(cluster, args)
    finally:
        cluster.stop()
        if args.keep:
            log(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    if args.json:
        doc = {"tree": str(args.tree), "finished": args.finished, "pending": args.pending, **fills, **figures}
        print(json.dumps(doc, indent=2, default=lambda o: None))
    else:
        report(args, fills, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
