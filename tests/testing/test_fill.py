"""The fast path `bench/scale.py` fills a database with writes rows identical to the API's: a copy
of a job the API ran is compared, table by table and column by column, with another job the API
ran the same way (ids and times aside, which differ between any two jobs)."""

from __future__ import annotations

import sqlite3

from iris.client import IrisClient
from iris.testing.fill import ID_COLUMNS, JOB_TABLES, Copy, copy_jobs

ONE_SLOT = [{"id": "cpu", "kind": "local", "workers": 1, "capacity": {"cpu": 1, "memory": "1G", "disk": "1G"}}]
DIFFER = ID_COLUMNS | {"insertion", "seq", "pid"}  # besides every *_ms time


def _rows(db, job_id: str) -> dict[str, list[dict]]:
    db.row_factory = sqlite3.Row
    out = {}
    for table in JOB_TABLES:
        order = {"tasks": "idx", "attempts": "idx, attempt", "logs": "seq"}.get(table, "rowid")
        rows = db.execute(f"SELECT * FROM {table} WHERE job_id = ? ORDER BY {order}", (job_id,)).fetchall()
        out[table] = [{k: r[k] for k in r.keys() if k not in DIFFER and not k.endswith("_ms")} for r in rows]
    return out


def test_a_copied_job_has_the_rows_the_api_writes_for_the_same_job(controller_factory):
    ctl = controller_factory(backends=ONE_SLOT)
    with IrisClient(ctl.url) as sdk:
        template = sdk.submit(["echo", "same line"], name="/alice/template", user="alice", cpu=1)
        assert sdk.wait(template, timeout=60).state == "SUCCEEDED"
        through_api = sdk.submit(["echo", "same line"], name="/alice/second", user="alice", cpu=1)
        assert sdk.wait(through_api, timeout=60).state == "SUCCEEDED"
    ctl.stop()
    db_path = ctl.state_dir / "controller.db"
    assert copy_jobs(db_path, template, [Copy("/bob/copy", "bob", earlier_ms=5000)], template_user="alice") == 1
    with sqlite3.connect(db_path) as db:
        api, copied = _rows(db, through_api), _rows(db, "/bob/copy")
        assert api["jobs"] and api["tasks"] and api["attempts"] and api["logs"]
        # Stored output holds each line's job id twice: the copy's shorter id stores each line in fewer bytes.
        per_line = 2 * (len("/bob/copy") - len(through_api))
        lines = {"jobs": len(api["logs"]), "attempts": len(api["logs"])}  # one task, one attempt
        for table in JOB_TABLES:
            for a, c in zip(api[table], copied[table], strict=True):
                # The copy is bob's: the user columns that named alice name bob.
                expected = {k: ("bob" if k in ("user", "owner") and v == "alice" else v) for k, v in a.items()}
                for column in ("log_chars", "log_bytes"):
                    if column in expected:
                        expected[column] += per_line * lines[table]
                assert expected == c, table
        ids = db.execute(
            "SELECT j.root_job_id, t.task_id, a.attempt_id, j.insertion > (SELECT insertion FROM jobs WHERE job_id = ?)"
            " FROM jobs j JOIN tasks t ON t.job_id = j.job_id JOIN attempts a ON a.task_id = t.task_id"
            " WHERE j.job_id = '/bob/copy'",
            (through_api,),
        ).fetchone()
        assert tuple(ids) == ("/bob/copy", "/bob/copy/0", "/bob/copy/0:0", 1)
        shifted = db.execute(
            "SELECT (SELECT submitted_ms FROM jobs WHERE job_id = ?) - submitted_ms FROM jobs WHERE job_id = '/bob/copy'",
            (template,),
        ).fetchone()[0]
        assert shifted == 5000
        # The copy's stored output counts against bob's total, as the API would have counted it.
        usage = db.execute("SELECT bytes FROM log_usage WHERE user = 'bob'").fetchone()
        assert usage is not None and usage[0] == copied["jobs"][0]["log_chars"] > 0
    ctl.start()  # the controller serves the copy like any other job
    with IrisClient(ctl.url) as sdk:
        described = sdk.describe("/bob/copy")
        assert described.job.state == "SUCCEEDED" and described.tasks[0].attempts[0].attempt_id == "/bob/copy/0:0"
        assert [line.text for line in sdk.logs("/bob/copy") if line.stream == "stdout"] == ["same line"]
