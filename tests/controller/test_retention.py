"""Finished jobs' logs, attempt folders and workspaces are deleted once the retention has passed;
running and recently finished jobs keep theirs, and a workspace layer stays while any job still
within retention names it."""

from __future__ import annotations

import hashlib
import io
import zipfile

from iris.backends.staging import bundle_folder, files_id, safe_dirname
from iris.rpc import controller_pb2 as pb
from tests.conftest import wait_until
from tests.controller.helpers import client, launch, logs, wait_state


def test_retention_deletes_old_logs_and_attempt_folders_but_not_live_ones(controller_factory):
    # Long enough to see the finished job's logs before they expire, even on a loaded machine.
    ctl = controller_factory(controller={"tick_interval": "1s", "log_retention": "8s"})
    c = client(ctl)
    done = launch(c, "done", ["sh", "-c", "echo finished; echo more"])
    live = launch(c, "live", ["sh", "-c", "echo still here; sleep 300"])
    assert wait_state(c, done).job.state == "SUCCEEDED"
    assert logs(c, done) == ["finished", "more"]
    folder = ctl.state_dir / "attempts" / safe_dirname(f"{done}/0:0")
    assert folder.is_dir()
    wait_until(lambda: logs(c, live) == ["still here"], message="live job's line")

    wait_until(lambda: not logs(c, done) and not folder.exists(), timeout=60, message="expired logs deleted")
    assert wait_state(c, done).job.state == "SUCCEEDED"  # the job itself is kept
    assert logs(c, live) == ["still here"]
    assert (ctl.state_dir / "attempts" / safe_dirname(f"{live}/0:0")).is_dir()


def _zip(entries: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _query(c, sql: str) -> list[list]:
    return [list(r) for r in c.execute_raw_query(pb.ExecuteRawQueryRequest(sql=sql)).rows]


def test_retention_removes_a_workspace_layer_once_no_retained_job_names_it(controller_factory):
    ctl = controller_factory(controller={"tick_interval": "1s", "log_retention": "5s"})
    c = client(ctl)
    data = _zip({"run.sh": b"cat note.txt"})
    bundle_id = "sha256:" + hashlib.sha256(data).hexdigest()
    notes = {"note.txt": b"from the workdir files"}
    bundle_dir, files_dir = bundle_folder(ctl.state_dir, bundle_id), bundle_folder(ctl.state_dir, files_id(notes))

    done = launch(c, "done", ["sh", "run.sh"], workspace_bundle=data, workdir_files=notes)
    live = launch(c, "live", ["sh", "-c", "sleep 300"], bundle_id=bundle_id)  # the same bundle, by id
    assert bundle_dir.is_dir() and files_dir.is_dir()
    assert wait_state(c, done).job.state == "SUCCEEDED"
    assert logs(c, done) == ["from the workdir files"]

    # `done` expires: its own workdir files go, the bundle stays while `live` runs on it.
    wait_until(lambda: not files_dir.exists(), timeout=60, message="the expired job's workdir files removed")
    assert _query(c, f"SELECT COUNT(*) FROM job_files WHERE job_id = '{done}'") == [[0]]
    assert bundle_dir.is_dir()
    assert _query(c, "SELECT content_id FROM bundles") == [[bundle_id]]

    # Once `live` has ended and expired too, nothing names the bundle: its bytes and folder go.
    c.terminate_job(pb.TerminateJobRequest(job_id=live))
    assert wait_state(c, live).job.state == "KILLED"
    wait_until(lambda: not bundle_dir.exists(), timeout=60, message="the unreferenced bundle's folder removed")
    assert _query(c, "SELECT COUNT(*) FROM bundles") == [[0]]
    assert wait_state(c, done).job.state == "SUCCEEDED"  # the jobs themselves are kept

    # Naming the bundle by id now asks for its bytes again; sent again, it runs as before.
    again = c.launch_job(pb.LaunchJobRequest(name="again", user="alice", command=["true"], bundle_id=bundle_id))
    assert again.bundle_missing
    rerun = launch(c, "again", ["sh", "run.sh"], workspace_bundle=data, workdir_files=notes)
    assert wait_state(c, rerun).job.state == "SUCCEEDED"
    assert logs(c, rerun) == ["from the workdir files"]


def test_layer_pins_keep_a_layer_from_removal_until_the_last_holder_lets_go():
    from iris.controller.db.workspace import LayerPins

    pins = LayerPins()
    with pins.hold("sha256:a", ""), pins.hold("sha256:a"):
        with pins.removable("sha256:a") as free:
            assert not free
        with pins.removable("sha256:b") as free:
            assert free
    with pins.removable("sha256:a") as free:
        assert free


def _replace_scenario(ctl):
    """Runs `job` on workspace A, lets it finish, replaces it with workspace B (a running job) that
    shares A's workdir files; returns (client, job id, A's bundle folder, B's bundle folder,
    the shared files' folder, A's and B's bundle ids)."""
    c = client(ctl)
    data_a, data_b = _zip({"run.sh": b"echo a"}), _zip({"run.sh": b"sleep 300"})
    id_a, id_b = ("sha256:" + hashlib.sha256(d).hexdigest() for d in (data_a, data_b))
    notes = {"note.txt": b"shared by both"}
    dir_a, dir_b = bundle_folder(ctl.state_dir, id_a), bundle_folder(ctl.state_dir, id_b)
    shared = bundle_folder(ctl.state_dir, files_id(notes))

    job = launch(c, "job", ["sh", "run.sh"], workspace_bundle=data_a, workdir_files=notes)
    assert wait_state(c, job).job.state == "SUCCEEDED"
    assert logs(c, job) == ["a"]
    again = launch(
        c, "job", ["sh", "run.sh"], workspace_bundle=data_b, workdir_files=notes, existing_job_policy="replace"
    )
    assert again == job
    assert dir_a.is_dir() and dir_b.is_dir() and shared.is_dir()
    return c, job, dir_a, dir_b, shared, id_a, id_b


def _check_only_a_released(c, job, dir_a, dir_b, shared, id_b) -> None:
    wait_until(lambda: not dir_a.exists(), timeout=60, message="the replaced job's own bundle folder removed")
    wait_until(lambda: _query(c, "SELECT COUNT(*) FROM released_layers") == [[0]], timeout=60, message="swept")
    assert _query(c, "SELECT content_id FROM bundles") == [[id_b]]
    assert dir_b.is_dir() and shared.is_dir()  # the running replacement still names them
    assert wait_state(c, job, states={"RUNNING"}).job.state == "RUNNING"


def test_retention_releases_the_layers_only_a_replaced_job_named(controller_factory):
    ctl = controller_factory(controller={"tick_interval": "1s", "log_retention": "4s"})
    c, job, dir_a, dir_b, shared, _, id_b = _replace_scenario(ctl)
    _check_only_a_released(c, job, dir_a, dir_b, shared, id_b)


def test_a_replaced_jobs_layers_are_released_after_a_crash_right_after_the_replace(controller_factory):
    ctl = controller_factory(controller={"tick_interval": "1s", "log_retention": "4s"})
    c, job, dir_a, dir_b, shared, _, id_b = _replace_scenario(ctl)
    ctl.kill()  # long before the retention has passed since the replace
    ctl.start()
    _check_only_a_released(client(ctl), job, dir_a, dir_b, shared, id_b)
