"""Federation end to end on loopback: handoff throughput from one parent to its peers, and how soon
a job that cannot run at home is running on a peer.

Four real controller processes (`python -m iris.controller`), each on a free loopback port with
its own SQLite database in a temp directory: a CPU-only parent (`marin`: 2 workers × 4 cpu) with
three GPU peers in `peers:` (`cw-0`, `cw-1`, `cw-2`: each a local backend of 25 workers × 8 h100,
600 GPUs in all). Heartbeat and sync run every 0.5 s (placement waits on the heartbeat's view of
peer capacity); everything else is the default, including the control tick (1 s, and at once on a
submit) and `max_federation_handoffs_per_cycle` (8 handoffs per peer promoted and not yet
accepted there). Both can be changed from the command line.

  1. Submit → running on a peer, one job at a time: a `sleep 5` job asking for 1 h100 is submitted
     to the parent through the SDK; the client polls the parent's GetJobStatus every 5 ms until it
     names the peer the job was placed on, then that PEER's GetJobStatus until the job is RUNNING
     there. The job is then cancelled on the parent. Also printed: submit → placed (the parent
     names a peer) and submit → HANDED_OFF on the parent. Target: p50 ≤ 2 s.
  2. Handoff throughput: N `true` jobs asking for 1 h100 each are submitted to the parent by four
     SDK clients at once (threads, each with its own connection; `--clients`), as a shared cluster
     sees a burst from several users, and the parent is polled every 20 ms with ExecuteRawQuery
     "SELECT COUNT(*) FROM federated_jobs WHERE handoff_state='HANDED_OFF'" until all N are handed
     off; jobs/s = N / (time of the last handoff − time of the first submit). (With one client
     submitting back to back, the figure was that client's round-trip rate more than the handoff's;
     `--clients 1` measures it that way.) Kueue's MultiKueue publishes 1.31 jobs/s; target ≥ 100/s.
     Also printed: the rate the clients submitted at, submit on the parent → admitted on a peer
     (p50, p90, from both controllers' own submit stamps), each process's CPU seconds over the
     burst, and how many of the jobs the peers have run to completion (informational).

This file runs unchanged against older revisions, for before/after ratios on one machine: copy it
into a folder beside a symlink to that revision's `bench/common.py`, and run it with that
revision's Python.

Figures are printed, never asserted; every wait is bounded; every process is stopped by PID.

    .venv/bin/python bench/federation_e2e.py            # N=200, 20 latency samples
    .venv/bin/python bench/federation_e2e.py --quick    # N=100, 8 latency samples
    .venv/bin/python bench/federation_e2e.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil  # noqa: E402
from common import (  # noqa: E402
    BenchTimeout,
    Controller,
    cpu_seconds,
    dump_json,
    local_backend,
    log,
    percentile,
    print_table,
    revision,
    wait_until,
)

from iris.client import IrisClient  # noqa: E402
from iris.controller.auth import load_or_create_signing_key, mint_token, public_key_pem  # noqa: E402
from iris.core.errors import NotFound  # noqa: E402

try:
    from iris.federation.ids import received_job_id
except ImportError:  # a revision from before peers filed received jobs under the requester's name

    def received_job_id(requester: str, job_id: str) -> str:
        return job_id


USER = "bench"
TERMINAL = {"SUCCEEDED", "FAILED", "KILLED", "UNSCHEDULABLE"}
HANDED_OFF_SQL = "SELECT COUNT(*) FROM federated_jobs WHERE handoff_state='HANDED_OFF'"
MULTIKUEUE_JOBS_PER_S = 1.31


def count(client: IrisClient, sql: str) -> int:
    return int(client.query(sql).rows[0].values[0].number_value)


def _spans_env(spans_dir: Path | None, name: str) -> dict:
    """Keyword arguments that make a controller add up its stages into `spans_dir/<name>.json`
    (none without --spans, so the file still runs against a revision whose harness has no env)."""
    return {"env": {**os.environ, "IRIS_SPANS": str(spans_dir / f"{name}.json")}} if spans_dir else {}


def start_federation(
    base: Path,
    peers: int,
    workers: int,
    gpus: int,
    settings: dict,
    max_per_cycle: int,
    started: list[Controller],
    spans_dir: Path | None = None,
) -> tuple[Controller, list[Controller], str]:
    """Starts the peers (trusting the parent's key), then the parent; returns a user token for the parent.

    Only an accountable user's jobs are handed off (a tokenless loopback caller is local_admin), so
    the bench submits with a token minted by the parent's own signing key."""
    parent_settings = {**settings, "max_federation_handoffs_per_cycle": max_per_cycle}
    parent = Controller(
        "marin",
        base,
        [local_backend("cpu", workers=2, cpu=4)],
        settings=parent_settings,
        **_spans_env(spans_dir, "marin"),
    )
    key = load_or_create_signing_key(None, parent.state_dir)
    trust = {"federation_peers": {parent.name: public_key_pem(key)}}
    peer_ctls = []
    for i in range(peers):
        ctl = Controller(
            f"cw-{i}",
            base,
            [local_backend("h100", workers=workers, cpu=8 * gpus, memory="64G", gpu="h100", gpu_count=gpus)],
            settings=settings,
            extra={"auth": trust},
            **_spans_env(spans_dir, f"cw-{i}"),
        )
        started.append(ctl)
        peer_ctls.append(ctl.start())
    parent.extra = {"peers": {p.name: {"address": p.url} for p in peer_ctls}}
    started.append(parent)
    parent.start()
    client = IrisClient(parent.url)
    try:
        wait_until(
            lambda: sum(p.reachable for p in client.peers()) == peers,
            timeout=30,
            interval=0.05,
            what="every peer to be reachable from the parent",
        )
    except BenchTimeout as exc:
        errors = "; ".join(f"{p.peer_id}: {p.last_error}" for p in client.peers() if not p.reachable)
        raise BenchTimeout(f"{exc} ({errors})") from None
    finally:
        client.close()
    return parent, peer_ctls, mint_token(key, parent.name, USER, "user", 3600)


def latency(parent: Controller, peers: dict[str, Controller], token: str, samples: int, quiet: bool) -> dict:
    log(f"[1] {samples} × submit → running on a peer of a 1-GPU `sleep 5` …", quiet)
    client = IrisClient(parent.url, token=token)
    peer_clients = {name: IrisClient(p.url) for name, p in peers.items()}
    placed, handed, running = [], [], []
    where: dict[str, int] = {}
    try:
        for i in range(samples):
            time.sleep(0.2)
            t0 = time.perf_counter()
            job = client.submit(["sleep", "5"], name=f"lat-{i}", user=USER, gpu="H100x1", cpu=1)
            deadline = time.monotonic() + 30
            peer_id, t_placed, t_handed, t_running = "", None, None, None
            while t_running is None:
                if time.monotonic() > deadline:
                    raise BenchTimeout(
                        f"{job} not running on a peer 30 s after submit "
                        f"(peer {peer_id or '?'}, placed {t_placed}, handed off {t_handed})"
                    )
                if not peer_id or t_handed is None:
                    st = client.status(job)
                    now = time.perf_counter()
                    if st.state in TERMINAL:
                        raise RuntimeError(f"{job} ended {st.state} on the parent: {st.error}")
                    if st.peer_id and not peer_id:
                        peer_id, t_placed = st.peer_id, now
                    if st.handoff_state == "HANDED_OFF" and t_handed is None:
                        t_handed = now
                if peer_id:
                    try:
                        pst = peer_clients[peer_id].status(received_job_id(parent.name, job))
                        if pst.state != "PENDING":
                            t_running = time.perf_counter()
                            if pst.state != "RUNNING":
                                raise RuntimeError(f"{job} is {pst.state} on {peer_id}: {pst.error}")
                            continue
                    except NotFound:
                        pass
                time.sleep(0.005)
            placed.append(t_placed - t0)
            handed.append((t_handed or t_running) - t0)
            running.append(t_running - t0)
            where[peer_id] = where.get(peer_id, 0) + 1
            client.cancel(job)
    finally:
        client.close()
        for c in peer_clients.values():
            c.close()
    return {
        "samples": samples,
        "placed_p50_s": percentile(placed, 50),
        "placed_p90_s": percentile(placed, 90),
        "handed_off_p50_s": percentile(handed, 50),
        "handed_off_p90_s": percentile(handed, 90),
        "running_p50_s": percentile(running, 50),
        "running_p90_s": percentile(running, 90),
        "running_max_s": max(running),
        "placed_on": where,
    }


def _submitted_ms(client: IrisClient, pattern: str) -> dict[str, int]:
    """Submit time (ms) of each throughput job a controller holds, keyed by its number."""
    rows = client.query(f"SELECT job_id, submitted_ms FROM jobs WHERE job_id LIKE '{pattern}'").rows
    return {r.values[0].string_value.rsplit("tp-", 1)[1]: int(r.values[1].number_value) for r in rows}


def throughput(parent: Controller, peers: dict[str, Controller], token: str, n: int, clients: int, quiet: bool) -> dict:
    log(f"[2] {clients} clients submitting {n} 1-GPU `true` jobs to the parent; waiting for every handoff …", quiet)
    submitters = [IrisClient(parent.url, token=token) for _ in range(clients)]
    watcher = IrisClient(parent.url)
    before = count(watcher, HANDED_OFF_SQL)
    progress: list[tuple[float, int]] = []  # (seconds since the first submit, handed off so far)
    stop = threading.Event()
    t0 = time.perf_counter()
    dispositions: dict[str, int] = {}
    lock = threading.Lock()

    def watch() -> None:
        # Polls from its own connection while the submits go on, so the first handoff is seen when it happens.
        deadline = time.monotonic() + max(120.0, n / 2)
        while not stop.is_set() and time.monotonic() < deadline:
            done = count(watcher, HANDED_OFF_SQL) - before
            progress.append((time.perf_counter() - t0, done))
            if done >= n:
                return
            time.sleep(0.02)

    def submit(k: int) -> None:
        # Client k submits jobs k, k + clients, …: a burst from several users at once, as a
        # shared cluster sees it, rather than one caller's round trips back to back.
        for i in range(k, n, clients):
            resp = submitters[k].launch(["true"], name=f"tp-{i}", user=USER, gpu="H100x1", cpu=1)
            with lock:
                dispositions[resp.disposition] = dispositions.get(resp.disposition, 0) + 1

    thread = threading.Thread(target=watch, daemon=True)
    me = psutil.Process()
    try:
        cpu0 = {name: cpu_seconds(c.pid) for name, c in [("parent", parent), *peers.items()]}
        own0 = sum(me.cpu_times()[:2])
        t0 = time.perf_counter()
        thread.start()
        workers = [threading.Thread(target=submit, args=(k,)) for k in range(clients)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        submitted = time.perf_counter() - t0
        thread.join(timeout=max(120.0, n / 2) + 5)
        stop.set()
        if not progress or progress[-1][1] < n:
            states = watcher.query("SELECT handoff_state, COUNT(*) FROM federated_jobs GROUP BY handoff_state").rows
            raise BenchTimeout(
                f"only {progress[-1][1] if progress else 0}/{n} handed off after "
                f"{time.perf_counter() - t0:.0f} s: "
                + ", ".join(f"{r.values[0].string_value}={r.values[1].number_value:.0f}" for r in states)
            )
        total = progress[-1][0]
        first = next(t for t, done in progress if done > 0)
        cpu = {name: cpu_seconds(c.pid) - cpu0[name] for name, c in [("parent", parent), *peers.items()]}
        cpu["bench clients"] = sum(me.cpu_times()[:2]) - own0
        # Where the time goes: submit on the parent → admitted on a peer (both stamp their own clock,
        # the same one here), and how far the peers have got with running the jobs (informational).
        sent = _submitted_ms(watcher, "/bench/tp-%")
        admitted: dict[str, int] = {}
        finished = 0
        for p in peers.values():
            with IrisClient(p.url) as pc:
                admitted.update(_submitted_ms(pc, "/bench/%tp-%"))
                finished += count(
                    pc, "SELECT COUNT(*) FROM jobs WHERE job_id LIKE '/bench/%tp-%' AND state = 'SUCCEEDED'"
                )
        to_peer = [(admitted[k] - sent[k]) / 1000 for k in sent if k in admitted]
        per_peer = {}
        for r in watcher.query(
            "SELECT peer_id, COUNT(*) FROM federated_jobs WHERE job_id LIKE '/bench/tp-%' GROUP BY peer_id"
        ).rows:
            per_peer[r.values[0].string_value] = int(r.values[1].number_value)
    finally:
        stop.set()
        thread.join(timeout=5) if thread.is_alive() else None
        for c in submitters:
            c.close()
        watcher.close()
    return {
        "jobs": n,
        "clients": clients,
        "submit_s": submitted,
        "first_handoff_s": first,
        "seconds": total,
        "jobs_per_s": n / total,
        "submits_per_s": n / submitted,
        "submit_to_admitted_p50_s": percentile(to_peer, 50),
        "submit_to_admitted_p90_s": percentile(to_peer, 90),
        "dispositions": dispositions,
        "per_peer": per_peer,
        "succeeded_on_peers_at_end": finished,
        "cpu_s": cpu,
        "parent_cpu_s": cpu["parent"],
        "progress": [(round(t, 3), d) for i, (t, d) in enumerate(progress) if i == 0 or d != progress[i - 1][1]],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="N=100 and 8 latency samples")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    ap.add_argument("-n", "--jobs", type=int, default=None, help="jobs for the throughput test (default 200)")
    ap.add_argument("--samples", type=int, default=None, help="latency samples (default 20)")
    ap.add_argument("--clients", type=int, default=4, help="client threads submitting the throughput burst")
    ap.add_argument("--peers", type=int, default=3)
    ap.add_argument("--workers", type=int, default=25, help="workers per peer (8 h100 each)")
    ap.add_argument("--tick-interval", default="1s")
    ap.add_argument("--heartbeat", default="0.5s", help="federation_heartbeat_interval")
    ap.add_argument("--sync", default="0.5s", help="federation_sync_interval")
    ap.add_argument("--max-per-cycle", type=int, default=8, help="max_federation_handoffs_per_cycle on the parent")
    ap.add_argument("--keep", action="store_true", help="keep the temp directory (configs, logs, databases)")
    ap.add_argument(
        "--spans",
        action="store_true",
        help="have each controller add up its stages (IRIS_SPANS) and print them, heaviest CPU first",
    )
    args = ap.parse_args(argv)
    n = args.jobs or (100 if args.quick else 200)
    samples = args.samples or (8 if args.quick else 20)
    settings = {
        "tick_interval": args.tick_interval,
        "federation_heartbeat_interval": args.heartbeat,
        "federation_sync_interval": args.sync,
    }
    quiet = False
    base = Path(tempfile.mkdtemp(prefix="iris-bench-fed-"))
    spans_dir = base / "spans" if args.spans else None
    if spans_dir:
        spans_dir.mkdir()
    started: list[Controller] = []
    t_start = time.perf_counter()
    load = os.getloadavg()
    results: dict = {}
    try:
        log(f"starting a parent and {args.peers} GPU peers ({args.workers} workers × 8 h100 each) …", quiet)
        parent, peer_ctls, token = start_federation(
            base, args.peers, args.workers, 8, settings, args.max_per_cycle, started, spans_dir
        )
        peers = {p.name: p for p in peer_ctls}
        results["latency"] = latency(parent, peers, token, samples, quiet)
        time.sleep(1.0)
        results["throughput"] = throughput(parent, peers, token, n, args.clients, quiet)
    finally:
        for ctl in reversed(started):
            ctl.stop()
        if spans_dir:
            results["spans"] = {
                f.stem: json.loads(f.read_text()) for f in sorted(spans_dir.glob("*.json")) if f.stat().st_size
            }
        if args.keep:
            log(f"kept {base}", quiet)
        else:
            shutil.rmtree(base, ignore_errors=True)
    elapsed = time.perf_counter() - t_start
    lat, tp = results["latency"], results["throughput"]
    config = {
        "peers": args.peers,
        "workers_per_peer": args.workers,
        "gpus_per_worker": 8,
        **settings,
        "max_federation_handoffs_per_cycle": args.max_per_cycle,
    }
    if args.json:
        dump_json(
            {
                "bench": "federation_e2e",
                "quick": args.quick,
                "config": config,
                **results,
                "elapsed_s": elapsed,
                "revision": revision(),
                "loadavg_start": load[0],
                "loadavg_end": os.getloadavg()[0],
            }
        )
        return 0
    print(f"\nIris {revision()}; load average {load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    print(
        f"Federation on loopback: a CPU-only parent and {args.peers} GPU peers "
        f"({args.workers} workers × 8 h100 each); heartbeat {args.heartbeat}, sync {args.sync}, "
        f"tick {args.tick_interval}, {args.max_per_cycle} handoffs per peer per pass\n"
    )
    print_table(
        ["figure", "Iris", "target", "MultiKueue"],
        [
            (
                f"handoff throughput, {tp['jobs']} jobs → {args.peers} peers, jobs/s",
                tp["jobs_per_s"],
                "≥ 100",
                MULTIKUEUE_JOBS_PER_S,
            ),
            ("submit → running on a peer, ms (p50)", lat["running_p50_s"] * 1000, "≤ 2,000", None),
            ("submit → running on a peer, ms (p90)", lat["running_p90_s"] * 1000, "—", None),
            ("  … submit → placed on a peer, ms (p50)", lat["placed_p50_s"] * 1000, "—", None),
            ("  … submit → HANDED_OFF on the parent, ms (p50)", lat["handed_off_p50_s"] * 1000, "—", None),
        ],
    )
    print(
        f"\nthroughput: {tp['jobs']} submitted in {tp['submit_s']:.2f} s ({tp['dispositions']}); first handoff "
        f"after {tp['first_handoff_s']:.2f} s, last after {tp['seconds']:.2f} s; spread {tp['per_peer']}; "
        f"{tp['succeeded_on_peers_at_end']} already succeeded on the peers"
    )
    print(
        f"  {tp['clients']} clients submitted at {tp['submits_per_s']:.0f} jobs/s; submit on the parent → admitted"
        f" on a peer p50 {tp['submit_to_admitted_p50_s'] * 1000:.0f} ms, p90 {tp['submit_to_admitted_p90_s'] * 1000:.0f} ms;"
        " CPU s: " + ", ".join(f"{k} {v:.2f}" for k, v in tp["cpu_s"].items())
    )
    print(
        f"latency: {lat['samples']} samples, max {lat['running_max_s'] * 1000:.0f} ms, placed on {lat['placed_on']}; "
        "the client polls every 5 ms"
    )
    print(f"Iris/MultiKueue handoff throughput: {tp['jobs_per_s'] / MULTIKUEUE_JOBS_PER_S:.0f}×")
    for name, totals in results.get("spans", {}).items():
        print(f"\nspans of {name} (whole run): stage, calls, wall ms, CPU ms")
        for stage, t in sorted(totals.items(), key=lambda kv: -kv[1]["cpu_s"])[:24]:
            print(f"  {stage:40s} {t['count']:6.0f} {t['wall_s'] * 1000:9.1f} {t['cpu_s'] * 1000:9.1f}")
    print(f"\n(total {elapsed:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
