"""Chaos through three real controllers: a CPU-only parent hands GPU jobs to two peers while the
harness SIGKILLs and restarts each of them at random (by PID), takes a peer away for a while, and
cancels some jobs. At the end every acknowledged job ran exactly once (a marker each run appends
to) or was cancelled, no process of any job is left, and every line a job printed is on the parent.

The suite runs a short variant (about a minute). `IRIS_CHAOS=1` runs the full one: 200 jobs over
five minutes with a peer away for a minute; `IRIS_CHAOS_SEED` replays a schedule. It prints its
figures either way (`pytest -s` shows them).
"""

from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass, field

from connectrpc.errors import ConnectError

from iris.controller.auth import load_or_create_signing_key, public_key_pem
from iris.rpc import controller_pb2 as pb
from iris.testing.processes import leftovers
from tests.conftest import start_together, wait_until
from tests.controller.helpers import TERMINAL, client, user_token
from tests.integration.test_federation import FAST, gpu_backend


@dataclass(frozen=True)
class Plan:
    jobs: int
    submit_s: float  # submissions spread over this long
    parent_kills: int
    peer_kills: int
    away_s: float  # one peer is down this long, once
    cancels: int
    seed: int


FULL = dict(jobs=200, submit_s=240.0, parent_kills=3, peer_kills=4, away_s=60.0, cancels=20)
SHORT = dict(jobs=16, submit_s=15.0, parent_kills=1, peer_kills=1, away_s=5.0, cancels=3)


@dataclass
class Tally:
    acked: dict[str, int] = field(default_factory=dict)  # job id -> lines it prints
    refused: int = 0  # submissions refused while the parent was down, then retried
    cancelled: set[str] = field(default_factory=set)
    faults: list[str] = field(default_factory=list)


def _command(runs, name: str, lines: int) -> list[str]:
    script = (
        f'echo "$IRIS_CLUSTER $$" >> {runs}/{name}.runs; i=1; while [ $i -le {lines} ]; do'
        f" echo {name}-line-$i; echo {name}-line-$i >> {runs}/{name}.out; i=$((i+1)); sleep 0.2; done"
    )
    return ["sh", "-c", script]


def _schedule(plan: Plan, rng: random.Random) -> list[tuple[float, str, object]]:
    """(time, kind, argument) events: submissions evenly spread, faults and cancels at random."""
    events: list[tuple[float, str, object]] = []
    for i in range(plan.jobs):
        events.append((plan.submit_s * i / plan.jobs, "submit", i))
    for _ in range(plan.parent_kills):
        events.append((rng.uniform(0.1, 0.9) * plan.submit_s, "kill", "marin"))
    for _ in range(plan.peer_kills):
        events.append((rng.uniform(0.1, 0.9) * plan.submit_s, "kill", rng.choice(["cw-a", "cw-b"])))
    events.append((rng.uniform(0.2, 0.5) * plan.submit_s, "away", "cw-b"))
    for i in rng.sample(range(plan.jobs), plan.cancels):
        events.append((plan.submit_s * i / plan.jobs + rng.uniform(0.5, 3.0), "cancel", i))
    return sorted(events, key=lambda e: e[0])


def test_federation_survives_random_kills_with_each_job_run_once_and_every_line_relayed(controller_factory, tmp_path):
    size = FULL if os.environ.get("IRIS_CHAOS") == "1" else SHORT
    plan = Plan(seed=int(os.environ.get("IRIS_CHAOS_SEED", random.randrange(1 << 30))), **size)
    rng = random.Random(plan.seed)
    runs = tmp_path / "runs"
    runs.mkdir()

    marin = controller_factory(
        "marin",
        start=False,
        controller=FAST,
        backends=[{"id": "cpu", "kind": "local", "workers": 1, "capacity": {"cpu": 2, "memory": "2G"}}],
    )
    trust = {"federation_peers": {"marin": public_key_pem(load_or_create_signing_key(None, marin.state_dir))}}
    peers = {
        n: controller_factory(n, start=False, backends=gpu_backend("h100", workers=2), controller=FAST, auth=trust)
        for n in ("cw-a", "cw-b")
    }
    marin.rewrite(peers={n: {"address": p.url} for n, p in peers.items()})
    start_together(*peers.values(), marin)
    clusters = {"marin": marin, **peers}
    token = user_token(marin, "alice")
    c = client(marin, token)
    wait_until(lambda: sum(p.reachable for p in c.list_peers(pb.ListPeersRequest()).peers) == 2, message="peers up")

    tally = Tally()
    names: dict[int, str] = {}
    events = _schedule(plan, rng)
    started = time.monotonic()

    def pace(at: float) -> None:
        delay = started + at - time.monotonic()
        if delay > 0:
            time.sleep(delay)  # pacing the load, not waiting for a state

    def load() -> None:
        """Submits and cancels on schedule from its own thread, so they meet the parent's deaths."""
        user = client(marin, token)
        for at, kind, arg in events:
            if kind not in ("submit", "cancel"):
                continue
            pace(at)
            if kind == "submit":
                name, lines = f"j{arg:03d}", rng_load.randint(3, 15)
                req = pb.LaunchJobRequest(
                    name=name,
                    user="alice",
                    command=_command(runs, name, lines),
                    resources=pb.Resources(device=pb.Device(kind="gpu", variant="h100", count=1)),
                )
                give_up = time.monotonic() + 60
                while time.monotonic() < give_up:
                    try:
                        tally.acked[user.launch_job(req).job_id] = lines
                        names[arg] = f"/alice/{name}"
                        break
                    except (ConnectError, OSError):
                        # The parent is down: what a user does is submit again, idempotently.
                        tally.refused += 1
                        req.existing_job_policy = "keep"
                        time.sleep(0.5)
            elif arg in names:
                try:
                    user.terminate_job(pb.TerminateJobRequest(job_id=names[arg]))
                    tally.cancelled.add(names[arg])
                except (ConnectError, OSError):
                    pass

    rng_load = random.Random(plan.seed + 1)
    loader = threading.Thread(target=load, name="chaos-load")
    loader.start()
    try:
        for at, kind, arg in events:
            if kind not in ("kill", "away"):
                continue
            pace(at)
            clusters[arg].kill()
            if kind == "kill":
                tally.faults.append(f"{time.monotonic() - started:.0f}s kill {arg}")
            else:
                tally.faults.append(f"{time.monotonic() - started:.0f}s {arg} away for {plan.away_s:g}s")
                time.sleep(plan.away_s)  # the outage itself
            clusters[arg].start()
    finally:
        loader.join()
    submitted_s = time.monotonic() - started

    def finished(job_id: str) -> bool:
        """Terminal on the parent and every line relayed (the parent says nothing is left to come)."""
        resp = c.fetch_logs(pb.FetchLogsRequest(job_id=job_id, task_index=-1, after_seq=1 << 62))
        return resp.job_state in TERMINAL and resp.job_finished

    pending = set(tally.acked)

    def all_done():
        pending.difference_update([j for j in list(pending) if finished(j)])
        return not pending

    wait_until(all_done, timeout=240 if plan.jobs > 50 else 120, interval=0.5, message=f"jobs to finish: {pending}")
    converged_s = time.monotonic() - started - submitted_s

    states: dict[str, int] = {}
    problems = []
    pids = []
    for job_id, lines in tally.acked.items():
        name = job_id.rsplit("/", 1)[1]
        state = c.get_job_status(pb.GetJobStatusRequest(job_id=job_id)).job.state
        states[state] = states.get(state, 0) + 1
        marker = runs / f"{name}.runs"
        ran = marker.read_text().splitlines() if marker.exists() else []
        pids += [int(r.split()[1]) for r in ran]
        got = [ln.text for ln in c.fetch_logs(pb.FetchLogsRequest(job_id=job_id, task_index=-1)).lines]
        printed = (runs / f"{name}.out").read_text().splitlines() if (runs / f"{name}.out").exists() else []
        expected = [f"{name}-line-{i}" for i in range(1, lines + 1)]
        if state == "SUCCEEDED":
            if len(ran) != 1:
                problems.append(f"{job_id} succeeded after {len(ran)} runs: {ran}")
            if got != expected:
                problems.append(f"{job_id} has {len(got)} of {lines} lines on the parent")
        elif state == "KILLED" and job_id in tally.cancelled:
            if len(ran) > 1:
                problems.append(f"{job_id} was cancelled after {len(ran)} runs: {ran}")
            if got != expected[: len(got)] or got[: len(printed)] != printed:
                problems.append(f"{job_id} printed {len(printed)} lines, the parent has {got}")
        else:
            problems.append(f"{job_id} ended {state} (cancelled: {job_id in tally.cancelled})")
    left = leftovers(runs, pids, timeout=10)
    print(
        f"\nchaos seed={plan.seed}: {len(tally.acked)} jobs acknowledged, {tally.refused} submit calls refused while"
        f" the parent was down (then retried), {len(tally.cancelled)} cancelled; end states {states}; faults {tally.faults};"
        f" submissions took {submitted_s:.0f}s, convergence {converged_s:.0f}s more; processes left {len(left)}"
    )
    assert not problems, problems
    assert not left, left
    assert len(tally.acked) >= plan.jobs // 2  # the run exercised what it claims to
