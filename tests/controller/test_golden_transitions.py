"""Golden replays: each file under golden/ is a recorded sequence of events, replayed through the
pure transitions and the applier on a real SQLite file with the controller's own schema; after each
step the rows it names must hold the values it expects.

Events: `place` (the scheduler places a task), `started` (its process started), `exit` (with a
code), `lost` (its worker is gone), `preempt` (by a task), `stop` (a user stops a job),
`decide_place` (a placement decided from the rows as they are now, applied only at a later
`apply`, so a step in between can race it). Expectations name rows by id under `jobs`, `tasks`
or `attempts` (a row expected absent is `null`), and `refused` lists the refusals the step's
apply must report.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from iris.backends.protocol import AttemptExit
from iris.controller.db import attempts as attempt_db
from iris.controller.db.database import Database, sql
from iris.controller.db.jobs import insert_job
from iris.controller.state import applier
from iris.controller.state import transitions as tr
from iris.core.bands import Band
from iris.core.job import JobSpec
from iris.core.resources import Resources

GOLDEN = Path(__file__).parent / "golden"
KEYS = {"jobs": "job_id", "tasks": "task_id", "attempts": "attempt_id"}


def _submit(db: Database, job: dict) -> None:
    parent = job.get("parent")
    spec = JobSpec(
        job_id=job["job"],
        user="alice",
        owner="alice",
        command=("true",),
        resources=Resources(cpu=1),
        replicas=job.get("replicas", 1),
        band=Band.parse(job.get("band", "interactive")),
        max_retries_failure=job.get("max_retries_failure", 0),
        max_retries_preemption=job.get("max_retries_preemption", 100),
        parent_job_id=parent,
        depth=job["job"].count("/") - 1,
        root_job_id="/".join(job["job"].split("/")[:3]),
    )
    with db.write() as conn:
        insert_job(conn, spec, 0)


def _job_of(some_id: str) -> str:
    return some_id.partition(":")[0].rpartition("/")[0]


def _replay_step(db: Database, event: dict, now: int, decided: list[tr.Change]) -> applier.Report:
    with db.write() as conn:
        if "place" in event:
            report = applier.place(conn, tr.Placement(event["place"], "local", event["worker"]), now)
        elif "decide_place" in event:
            decided.append(tr.place(tr.Placement(event["decide_place"], "local", event["worker"]), now))
            return applier.Report()
        elif "apply" in event:
            report = applier.apply(conn, decided)
            decided.clear()
        elif "started" in event:
            job = attempt_db.mark_started(conn, event["started"], 4242, "", now)
            report = applier.Report(jobs=[job] if job else [])
        elif "exit" in event:
            report = applier.end_attempt(conn, tr.exited(AttemptExit(event["exit"], event["code"])), now)
        elif "lost" in event:
            report = applier.end_attempt(conn, tr.WorkerLost(event["lost"], event["reason"]), now)
        elif "preempt" in event:
            report = applier.end_attempt(conn, tr.Preempted(event["preempt"], event["by"]), now)
        elif "stop" in event:
            applier.stop_job(conn, event["stop"], event["reason"], now)
            return applier.Report()
        else:
            raise AssertionError(f"unknown event {event}")
        return report.merge(applier.roll_up(conn, report.jobs, now))


def _differences(db: Database, expect: dict, report: applier.Report) -> list[str]:
    out: list[str] = []
    with db.read() as conn:
        for table, rows in expect.items():
            if table == "refused":
                got = [{"change": r.change, "subject": r.subject, "reason": r.reason} for r in report.refused]
                if got != rows:
                    out.append(f"refused is {got}, expected {rows}")
                continue
            for row_id, fields in rows.items():
                row = (
                    conn.execute(sql(f"SELECT * FROM {table} WHERE {KEYS[table]} = :i"), {"i": row_id})
                    .mappings()
                    .first()
                )
                if fields is None:
                    if row is not None:
                        out.append(f"{table} {row_id} exists ({dict(row)}), expected no such row")
                    continue
                if row is None:
                    out.append(f"{table} {row_id} does not exist")
                    continue
                out += [
                    f"{table} {row_id}.{name} is {row[name]!r}, expected {want!r}"
                    for name, want in fields.items()
                    if row[name] != want
                ]
    if "refused" not in expect and report.refused:
        out.append(f"unexpected refusals: {report.refused}")
    return out


def replay(path: Path, db: Database) -> None:
    case = yaml.safe_load(path.read_text())
    for job in case["jobs"]:
        _submit(db, job)
    decided: list[tr.Change] = []
    for number, step in enumerate(case["steps"], start=1):
        report = _replay_step(db, step["event"], number * 1000, decided)
        diffs = _differences(db, step.get("expect", {}), report)
        assert not diffs, f"{path.name} step {number} {step['event']}:\n  " + "\n  ".join(diffs)


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.yaml")), ids=lambda p: p.stem)
def test_golden_replay_matches_every_recorded_step(path, tmp_path):
    db = Database(tmp_path / "controller.db")
    try:
        replay(path, db)
    finally:
        db.close()


def test_golden_replay_names_the_step_and_the_row_that_differs(tmp_path):
    wrong = tmp_path / "wrong.yaml"
    case = yaml.safe_load((GOLDEN / "retry_after_failure.yaml").read_text())
    case["steps"][2]["expect"]["tasks"]["/alice/train/0"]["failure_count"] = 7
    wrong.write_text(yaml.safe_dump(case))
    db = Database(tmp_path / "controller.db")
    try:
        with pytest.raises(AssertionError) as caught:
            replay(wrong, db)
    finally:
        db.close()
    message = str(caught.value)
    assert "wrong.yaml step 3" in message
    assert "tasks /alice/train/0.failure_count is 1, expected 7" in message


def test_golden_files_cover_the_recorded_cases():
    names = {p.stem for p in GOLDEN.glob("*.yaml")}
    assert {
        "retry_after_failure",
        "preemption_budget",
        "worker_loss",
        "cascade_kill",
        "cancel_races_placement",
    } <= names
