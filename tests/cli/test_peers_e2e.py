"""Waiting on federation peers, seen from the CLI: a bounded queue wait, a peer that refuses this
cluster's key named as such, `cluster peers`, and stale capacity marked in `explain`."""

from __future__ import annotations

import json
import time

from iris.controller.auth import load_or_create_signing_key, public_key_pem
from tests.conftest import free_port, start_together, wait_until
from tests.controller.helpers import user_token

FAST = {"tick_interval": "1s", "federation_heartbeat_interval": "0.5s", "federation_sync_interval": "0.5s"}


def _parent(controller_factory, peers: dict):
    parent = controller_factory(
        "marin",
        start=False,
        controller=FAST,
        backends=[{"id": "cpu", "kind": "local", "workers": 1, "capacity": {"cpu": 2, "memory": "4G"}}],
    )
    parent.rewrite(peers=peers)
    parent.start()
    parent.extra_env["IRIS_TOKEN"] = user_token(parent, "alice")
    return parent


def test_scheduling_timeout_ends_a_job_queued_for_a_dead_peer(controller_factory):
    parent = _parent(controller_factory, {"ghost": {"address": f"http://127.0.0.1:{free_port()}"}})
    began = time.monotonic()
    run = parent.cli(
        "job", "run", "--target-cluster", "ghost", "--scheduling-timeout", "5s", "--job-name", "lost", "--", "true"
    )
    waited = time.monotonic() - began
    assert run.returncode == 2, run.stderr
    assert "UNSCHEDULABLE (not placed within its scheduling timeout (5s)" in run.stderr
    assert "peer ghost does not answer" in run.stderr  # the wait said why while it lasted
    assert 4.5 <= waited < 30


def test_a_job_queued_for_a_peer_says_why_its_start_is_unknown(controller_factory):
    parent = _parent(controller_factory, {"ghost": {"address": f"http://127.0.0.1:{free_port()}"}})
    queued = parent.cli("job", "run", "--no-wait", "--target-cluster", "ghost", "--job-name", "far", "--", "true")
    assert queued.returncode == 0, queued.stderr
    job = queued.stdout.strip()
    listed = parent.cli("job", "list").stdout.splitlines()
    header, row = listed[0].split(), next(line for line in listed[1:] if line.startswith(job))
    assert row.split()[header.index("START")] == "unknown", listed
    described = " ".join(parent.cli("job", "describe", job).stdout.split())
    assert "Expected start: unknown" in described, described
    assert "no estimate: it waits here for a federation peer with room" in described, described
    as_json = json.loads(parent.cli("-o", "json", "job", "describe", job).stdout)
    assert "peers report no start times" in as_json["job"]["start_basis"], as_json
    assert parent.cli("job", "stop", job).returncode == 0


def test_no_wait_exits_2_for_a_job_rejected_at_submit_and_0_for_one_accepted(controller_factory):
    parent = _parent(controller_factory, {"ghost": {"address": f"http://127.0.0.1:{free_port()}"}})
    rejected = parent.cli("job", "run", "--no-wait", "--gpu", "H100x8", "--job-name", "nowhere", "--", "true")
    assert rejected.returncode == 2, rejected.stderr
    assert "no local backend can host" in rejected.stderr
    as_json = parent.cli("-o", "json", "job", "run", "--no-wait", "--gpu", "H100x8", "--", "true")
    assert as_json.returncode == 2, as_json.stderr
    assert (json.loads(as_json.stdout)["state"], json.loads(as_json.stdout)["disposition"]) == (
        "UNSCHEDULABLE",
        "rejected",
    )
    accepted = parent.cli("job", "run", "--no-wait", "--job-name", "home", "--", "true")
    assert accepted.returncode == 0, accepted.stderr


def test_a_peer_refusing_the_key_is_named_as_such(controller_factory):
    stranger = controller_factory(
        "cw-h100",
        controller=FAST,
        backends=[
            {
                "id": "h100",
                "kind": "local",
                "workers": 1,
                "capacity": {"cpu": 8, "memory": "16G"},
                "devices": {"gpu": "h100", "count": 8},
            }
        ],
        auth={"federation_peers": {}},  # trusts nobody: the parent's key is refused
    )
    parent = _parent(controller_factory, {"cw-h100": {"address": stranger.url}})

    def refusing():
        doc = json.loads(parent.cli("-o", "json", "cluster", "peers").stdout)
        return doc["peers"] and doc["peers"][0]["status"] == "refusing" and doc["peers"][0]

    peer = wait_until(refusing, message="the peer's refusal to be reported")
    assert "refuses this cluster's key" in peer["last_error"] and "auth.federation_peers" in peer["last_error"]
    table = parent.cli("cluster", "peers").stdout.splitlines()
    assert table[0].split()[:3] == ["PEER", "ADDRESS", "STATUS"] and "refusing" in table[1]
    submitted = parent.cli(
        "job", "run", "--no-wait", "--target-cluster", "cw-h100", "--job-name", "pinned", "--", "true"
    )
    assert submitted.returncode == 0, submitted.stderr

    def reason():
        jobs = json.loads(parent.cli("-o", "json", "job", "list").stdout)["jobs"]
        text = jobs[0].get("pending_reason", "")
        return "refuses this cluster's key" in text and text

    assert wait_until(reason, message="the key cause in the pending reason").startswith("Queued for peer cw-h100")
    parent.cli("job", "stop", "pinned")


def test_explain_marks_capacity_of_a_silent_peer_as_stale(controller_factory):
    peer = controller_factory(
        "cw-h100",
        start=False,
        controller=FAST,
        backends=[
            {
                "id": "h100",
                "kind": "local",
                "workers": 1,
                "capacity": {"cpu": 8, "memory": "16G"},
                "devices": {"gpu": "h100", "count": 8},
            }
        ],
    )
    marin = controller_factory(
        "marin",
        start=False,
        controller=FAST,
        backends=[{"id": "cpu", "kind": "local", "workers": 1, "capacity": {"cpu": 2, "memory": "4G"}}],
    )
    peer.rewrite(
        auth={"federation_peers": {"marin": public_key_pem(load_or_create_signing_key(None, marin.state_dir))}}
    )
    marin.rewrite(peers={"cw-h100": {"address": peer.url}})
    start_together(peer, marin)
    marin.extra_env["IRIS_TOKEN"] = user_token(marin, "alice")
    wait_until(
        lambda: json.loads(marin.cli("-o", "json", "cluster", "peers").stdout)["peers"][0]["status"] == "up",
        message="the peer to answer",
    )
    peer.stop()
    wait_until(
        lambda: json.loads(marin.cli("-o", "json", "cluster", "peers").stdout)["peers"][0]["status"] == "down",
        message="the peer to be seen down",
    )
    queued = marin.cli("job", "run", "--no-wait", "--target-cluster", "cw-h100", "--job-name", "later", "--", "true")
    assert queued.returncode == 0, queued.stderr
    explained = marin.cli("job", "explain", "later")
    assert "STALE" in explained.stdout and "h100" in explained.stdout, explained.stdout
    marin.cli("job", "stop", "later")


def test_a_job_handed_to_a_peer_runs_with_its_workspace(controller_factory, tmp_path):
    marin = controller_factory(
        "marin",
        start=False,
        controller=FAST,
        backends=[{"id": "cpu", "kind": "local", "workers": 1, "capacity": {"cpu": 2, "memory": "4G"}}],
    )
    key = public_key_pem(load_or_create_signing_key(None, marin.state_dir))
    peer = controller_factory(
        "cw-h100",
        controller=FAST,
        backends=[{"id": "cpu", "kind": "local", "workers": 1, "capacity": {"cpu": 2, "memory": "4G"}}],
        auth={"federation_peers": {"marin": key}, "allowed_submitters": ["*"]},
    )
    marin.rewrite(peers={"cw-h100": {"address": peer.url}})
    marin.start()
    marin.extra_env["IRIS_TOKEN"] = user_token(marin, "alice")
    project = tmp_path / "project"
    (project / "conf").mkdir(parents=True)
    (project / "conf" / "run.txt").write_text("settings from the submitter's folder\n")
    run = marin.cli(
        "job", "run", "--target-cluster", "cw-h100", "--job-name", "shipped", "--", "cat conf/run.txt", cwd=project
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[1:] == ["settings from the submitter's folder"]
    stored = json.loads(peer.cli("-o", "json", "query", "SELECT count(*) FROM bundles").stdout)["rows"]
    assert stored == [[1]]  # the peer holds the bundle it received inline, by its content id


def test_cluster_peers_on_the_receiving_side_shows_the_cluster_it_receives_from(controller_factory):
    """A peer configures no `peers:` of its own, yet `cluster peers` there names the cluster that
    hands it jobs: inbound, trusted, when it last made a handoff or sync, and its jobs not ended."""
    marin = controller_factory("marin", start=False, controller=FAST)
    key = public_key_pem(load_or_create_signing_key(None, marin.state_dir))
    peer = controller_factory(
        "cw-h100", controller=FAST, auth={"federation_peers": {"marin": key}, "allowed_submitters": ["*"]}
    )
    before = json.loads(peer.cli("-o", "json", "cluster", "peers").stdout)
    assert before["peers"] == [] and [
        (p["peer_id"], p["trusted"], p["last_contact_ms"]) for p in before["inbound"]
    ] == [("marin", True, 0)]
    marin.rewrite(peers={"cw-h100": {"address": peer.url}})
    marin.start()
    marin.extra_env["IRIS_TOKEN"] = user_token(marin, "alice")
    sent = marin.cli("job", "run", "--no-wait", "--target-cluster", "cw-h100", "--job-name", "away", "--", "sleep 300")
    assert sent.returncode == 0, sent.stderr

    def inbound():
        doc = json.loads(peer.cli("-o", "json", "cluster", "peers").stdout)
        return doc["inbound"] and doc["inbound"][0]["active_federated_jobs"] == 1 and doc

    doc = wait_until(inbound, message="the peer to hold the handed-off job")
    row = doc["inbound"][0]
    assert doc["peers"] == [] and row["peer_id"] == "marin" and row["direction"] == "inbound", doc
    assert int(row["last_contact_ms"]) > 0 and row["last_call"] in ("HandOffJobs", "LaunchJob", "FederationSync")
    assert row["last_contact_age_s"] is not None
    table = peer.cli("cluster", "peers")
    assert table.returncode == 0 and "no federation peers" not in table.stderr, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["INBOUND", "PEER", "TRUSTED", "LAST", "CONTACT", "JOBS"], lines
    assert lines[1].split()[:2] == ["marin", "yes"] and lines[1].split()[-1] == "1", lines
    # The sending side lists the same link outbound, and nothing inbound.
    parent = json.loads(marin.cli("-o", "json", "cluster", "peers").stdout)
    assert [(p["peer_id"], p["direction"]) for p in parent["peers"]] == [("cw-h100", "outbound")]
    assert parent["inbound"] == []
    assert marin.cli("job", "stop", "away").returncode == 0
