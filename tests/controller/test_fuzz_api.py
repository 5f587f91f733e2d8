"""A bounded fuzz of every RPC with hostile values, from a seeded generator.

After each category of requests a canary job must still run to success, no request may have been
answered `internal`, and the database must hold exactly the jobs that were acknowledged, each one
whole (its config and all its tasks): a refused request writes nothing.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable, Iterator

from connectrpc.errors import ConnectError

from iris.rpc import controller_pb2 as pb
from tests.controller.helpers import client, launch, wait_state

SEED = 20261130
PER_CATEGORY = 500

FLOATS = [float("inf"), float("-inf"), float("nan"), 1e300, -1e300, 1.8e305, -1.0, 0.0, 5e-324, 2.0**63, 3.5]
INT32 = [-(2**31), 2**31 - 1, -1, 0, 1, 7]
PAGE_TOKENS = ["", "12", "99999999999999999999999", "\u00b2", "-1", "x"]
INT64 = [-(2**63), 2**63 - 1, -1, 0, 2**40]
STRINGS = [
    "",
    "\0",
    "a\0b",
    "x" * 70_000,
    "n" * 129,
    "/",
    "//",
    "/alice/../x",
    "../../etc",
    "é",
    "\u202e",
    " ",
    "%s%n",
    "'; DROP TABLE jobs; --",
    "PENDING," * 9000,
    "alice",
    "/alice/canary-0",
]


def _pick(rng: random.Random, pool: list):
    return pool[rng.randrange(len(pool))]


def _launch_numbers(rng: random.Random) -> Iterator[tuple[str, Callable]]:
    for i in range(PER_CATEGORY):
        req = pb.LaunchJobRequest(name=f"n{i}", user="alice", command=["true"])
        setattr(req.resources, "cpu", _pick(rng, FLOATS)) if rng.random() < 0.5 else None
        if rng.random() < 0.3:
            req.resources.memory_bytes = _pick(rng, INT64)
        if rng.random() < 0.3:
            req.resources.disk_bytes = _pick(rng, INT64)
        if rng.random() < 0.3:
            req.resources.device.kind = _pick(rng, ["gpu", "tpu", "cpu", "abacus"])
            req.resources.device.count = _pick(rng, INT32)
        if rng.random() < 0.3:
            req.replicas = _pick(rng, [-1, 0, 10**6, 2**31 - 1])
        for field in ("timeout_s", "scheduling_timeout_s"):
            if rng.random() < 0.3:
                setattr(req, field, _pick(rng, FLOATS))
        for field in ("max_retries_failure", "max_retries_preemption"):
            if rng.random() < 0.3:
                setattr(req, field, _pick(rng, INT32))
        yield "LaunchJob", lambda c, req=req: c.launch_job(req)


def _launch_strings(rng: random.Random) -> Iterator[tuple[str, Callable]]:
    fields = ["name", "user", "priority", "existing_job_policy", "parent_job_id", "client_revision_date", "workdir"]
    for i in range(PER_CATEGORY):
        req = pb.LaunchJobRequest(name=f"s{i}", user="alice", command=["true"])
        for field in rng.sample(fields, rng.randrange(1, 3)):
            setattr(req, field, _pick(rng, STRINGS))
        if rng.random() < 0.3:
            req.command[:] = [_pick(rng, STRINGS) for _ in range(rng.randrange(1, 3))]
        if rng.random() < 0.3:
            req.env[_pick(rng, STRINGS)] = _pick(rng, STRINGS)
        if rng.random() < 0.3:
            req.constraints.add(key=_pick(rng, STRINGS), op=_pick(rng, ["EQ", "IN", "GT", "\0"]), values=["a"])
        if rng.random() < 0.2:
            req.workdir_files[_pick(rng, STRINGS)] = b"x"
        yield "LaunchJob", lambda c, req=req: c.launch_job(req)


def _launch_lists(rng: random.Random) -> Iterator[tuple[str, Callable]]:
    for i in range(PER_CATEGORY // 10):
        n = _pick(rng, [1, 100, 1001, 5000, 10_001])
        req = pb.LaunchJobRequest(name=f"l{i}", user="alice", command=["true"])
        kind = rng.randrange(4)
        if kind == 0:
            req.env.update({f"K{j}": "v" for j in range(n)})
        elif kind == 1:
            req.constraints.extend([pb.Constraint(key="region", op="IN", values=["a"] * min(n, 300))] * (n // 50 + 1))
        elif kind == 2:
            req.command.extend(["echo"] + ["a"] * n)
        else:
            req.workdir_files.update({f"f{j}": b"" for j in range(n)})
        yield "LaunchJob", lambda c, req=req: c.launch_job(req)


def _reads(rng: random.Random) -> Iterator[tuple[str, Callable]]:
    for _ in range(PER_CATEGORY):
        s, n32, n64 = _pick(rng, STRINGS), _pick(rng, INT32), _pick(rng, INT64)
        calls = [
            ("GetJobStatus", lambda c: c.get_job_status(pb.GetJobStatusRequest(job_id=s, include_tasks=True))),
            ("ListTasks", lambda c: c.list_tasks(pb.ListTasksRequest(job_id=s, include_attempts=True))),
            ("ExplainJob", lambda c: c.explain_job(pb.ExplainJobRequest(job_id=s))),
            ("TerminateJob", lambda c: c.terminate_job(pb.TerminateJobRequest(job_id=s, reason=_pick(rng, STRINGS)))),
            (
                "FetchLogs",
                lambda c: c.fetch_logs(
                    pb.FetchLogsRequest(job_id=s, task_index=n32, after_seq=n64, tail=n32, limit=n32)
                ),
            ),
            (
                "ListJobs",
                lambda c: c.list_jobs(
                    pb.ListJobsRequest(
                        state=s, prefix=_pick(rng, STRINGS), user=s, limit=n32, page_token=_pick(rng, PAGE_TOKENS)
                    )
                ),
            ),
            ("ListWorkers", lambda c: c.list_workers(pb.ListWorkersRequest(backend_id=s))),
            ("ListBackends", lambda c: c.list_backends(pb.ListBackendsRequest())),
            ("ListPeers", lambda c: c.list_peers(pb.ListPeersRequest())),
            ("GetClusterInfo", lambda c: c.get_cluster_info(pb.GetClusterInfoRequest())),
            ("FederationSync", lambda c: c.federation_sync(pb.FederationSyncRequest(requester=s, cursor=n64))),
        ]
        yield _pick(rng, calls)


def _queries(rng: random.Random) -> Iterator[tuple[str, Callable]]:
    sqls = [
        "SELECT zeroblob(1000000000)",
        "SELECT randomblob(1000000000)",
        "SELECT count(*) FROM jobs",
        "DELETE FROM jobs",
        "PRAGMA writable_schema=1",
        "SELECT * FROM jobs; DELETE FROM jobs",
        "SELECT load_extension('x')",
        "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT max(x) FROM r",
        "ATTACH 'x.db' AS x",
        "SELECT replace(printf('%900000c', 'x'), ' ', 'ab')",
        "",
        "\0",
        "SELECT 1" + " " * 70_000,
    ]
    for _ in range(PER_CATEGORY // 10):
        sql, limit = _pick(rng, sqls), _pick(rng, INT32)
        yield (
            "ExecuteRawQuery",
            lambda c, sql=sql, limit=limit: c.execute_raw_query(pb.ExecuteRawQueryRequest(sql=sql, limit=limit)),
        )


def _handoffs(rng: random.Random) -> Iterator[tuple[str, Callable]]:
    for i in range(PER_CATEGORY // 3):
        req = pb.LaunchJobRequest(name=f"/alice/h{i}", command=["true"])
        req.handoff.requester_cluster = _pick(rng, STRINGS)
        req.handoff.owner_principal = _pick(rng, STRINGS)
        req.handoff.nonce = _pick(rng, STRINGS)
        yield "LaunchJob", lambda c, req=req: c.launch_job(req)


CATEGORIES = [_launch_numbers, _launch_strings, _launch_lists, _reads, _queries, _handoffs]


def _check_database(path, acknowledged: set[str]) -> None:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        jobs = {r[0]: r[1] for r in db.execute("SELECT job_id, replicas FROM jobs")}
        # A job refused at submit (no backend can host it) is stored UNSCHEDULABLE without tasks.
        refused = {
            r[0] for r in db.execute("SELECT job_id FROM jobs WHERE state = 'UNSCHEDULABLE' AND started_ms IS NULL")
        }
        configs = {r[0] for r in db.execute("SELECT job_id FROM job_config")}
        tasks = dict(db.execute("SELECT job_id, COUNT(*) FROM tasks GROUP BY job_id").fetchall())
    assert set(jobs) <= acknowledged, sorted(set(jobs) - acknowledged)[:5]
    assert configs == set(jobs)
    for job_id, replicas in jobs.items():
        assert tasks.get(job_id) == replicas or (job_id in refused and job_id not in tasks), (
            job_id,
            replicas,
            tasks.get(job_id),
        )


def test_every_rpc_survives_hostile_values_and_a_canary_still_runs(controller_factory):
    ctl = controller_factory(controller={"tick_interval": "1s", "query_timeout": "1s"})
    c = client(ctl)
    rng = random.Random(SEED)
    acknowledged: set[str] = set()
    sent = 0
    for round_, category in enumerate(CATEGORIES):
        refused = 0
        for method, call in category(rng):
            sent += 1
            try:
                resp = call(c)
            except ConnectError as exc:
                assert exc.code.name not in ("INTERNAL", "UNKNOWN"), (category.__name__, method, exc.message)
                refused += 1
                continue
            if method == "LaunchJob":
                acknowledged.add(resp.job_id)
        assert refused > 0, f"{category.__name__} sent nothing hostile enough to be refused"
        canary = launch(c, f"canary-{round_}", ["echo", "alive"])
        acknowledged.add(canary)
        assert wait_state(c, canary, timeout=60).job.state == "SUCCEEDED", category.__name__
        _check_database(ctl.state_dir / "controller.db", acknowledged)
    assert sent > 1500 and len(acknowledged) > len(CATEGORIES)  # some hostile-looking requests were valid
