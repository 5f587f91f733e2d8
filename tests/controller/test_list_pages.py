"""Every list the API serves, paged on a real controller: pages cover each row exactly once while
rows are added between them, and a token that is malformed, of another list or of other filters is
refused with INVALID_ARGUMENT."""

from __future__ import annotations

from iris.client import IrisClient
from iris.rpc import controller_pb2 as pb
from tests.controller.helpers import client, error_code, launch, wait_state


def _pages(call, request, field: str) -> tuple[list, list[int]]:
    """Every item of a paged list, and the size of each page it came in."""
    items, sizes = [], []
    while True:
        page = call(request)
        batch = list(getattr(page, field))
        items += batch
        sizes.append(len(batch))
        if not page.next_page_token:
            return items, sizes
        request.page_token = page.next_page_token


def test_list_jobs_pages_cover_each_job_once_while_jobs_are_submitted_between_pages(controller):
    c = client(controller)
    before = {launch(c, f"old-{i}", ["true"]) for i in range(7)}
    seen, added, token = [], set(), ""
    while True:
        page = c.list_jobs(pb.ListJobsRequest(limit=2, page_token=token, user="alice"))
        seen += [j.job_id for j in page.jobs]
        added.add(launch(c, f"new-{len(added)}", ["true"]))  # newer than every page not yet read
        token = page.next_page_token
        if not token:
            break
    assert sorted(seen) == sorted(before) and len(seen) == len(set(seen))
    assert not added & set(seen)


def test_list_tasks_pages_by_index_and_describe_counts_every_task(controller):
    c = client(controller)
    job = launch(c, "wide", ["true"], replicas=5)
    first = wait_state(c, job)
    assert first.total_tasks == 5 and first.next_task_page_token == "" and len(first.tasks) == 5
    tasks, sizes = _pages(c.list_tasks, pb.ListTasksRequest(job_id=job, limit=2, include_attempts=True), "tasks")
    assert [t.index for t in tasks] == [0, 1, 2, 3, 4] and sizes == [2, 2, 1]
    assert all(len(t.attempts) == 1 for t in tasks)
    with IrisClient(controller.url) as sdk:
        assert [t.index for t in sdk.iter_tasks(job, page_size=2)] == [0, 1, 2, 3, 4]


def test_list_workers_and_backends_page_by_id(controller_factory):
    ctl = controller_factory(
        backends=[
            {"id": "a", "kind": "local", "workers": 3, "capacity": {"cpu": 1, "memory": "1G", "disk": "1G"}},
            {"id": "b", "kind": "local", "workers": 2, "capacity": {"cpu": 1, "memory": "1G", "disk": "1G"}},
        ]
    )
    c = client(ctl)
    workers, sizes = _pages(c.list_workers, pb.ListWorkersRequest(limit=2), "workers")
    keys = [(w.backend_id, w.worker_id) for w in workers]
    assert keys == sorted(keys) and len(set(keys)) == 5 and sizes == [2, 2, 1]
    only_b, _ = _pages(c.list_workers, pb.ListWorkersRequest(backend_id="b", limit=1), "workers")
    assert {w.backend_id for w in only_b} == {"b"} and len(only_b) == 2
    backends, sizes = _pages(c.list_backends, pb.ListBackendsRequest(limit=1), "backends")
    assert [b.id for b in backends] == ["a", "b"] and sizes == [1, 1]
    assert c.list_peers(pb.ListPeersRequest()).total == 0
    with IrisClient(ctl.url) as sdk:
        assert len(sdk.workers()) == 5 and [b.id for b in sdk.backends().backends] == ["a", "b"]
        assert len(list(sdk.iter_workers(page_size=2))) == 5


def test_list_endpoints_pages_by_job_and_name_while_endpoints_are_added(controller):
    c = client(controller)
    job = launch(c, "serve", ["sleep", "120"])
    running = wait_state(c, job, states=("RUNNING",))
    attempt = running.tasks[0].attempts[0].attempt_id
    for name in ("b", "d", "f"):
        c.register_endpoint(pb.RegisterEndpointRequest(job_id=job, attempt_id=attempt, name=name, port=9000))
    first = c.list_endpoints(pb.ListEndpointsRequest(limit=2))
    assert [e.name for e in first.endpoints] == ["b", "d"] and first.total == 3
    c.register_endpoint(pb.RegisterEndpointRequest(job_id=job, attempt_id=attempt, name="a", port=9001))
    rest = c.list_endpoints(pb.ListEndpointsRequest(limit=2, page_token=first.next_page_token))
    assert [e.name for e in rest.endpoints] == ["f"] and rest.next_page_token == ""
    with IrisClient(controller.url) as sdk:
        assert [e.name for e in sdk.iter_endpoints(job, page_size=1)] == ["a", "b", "d", "f"]
    c.terminate_job(pb.TerminateJobRequest(job_id=job))


def test_a_page_token_the_server_never_gave_is_refused(controller):
    forged_digest = "WzEsImpvYnMiLCIwMDAwMDAwMDAwMDAiLFsiYSJdXQ"  # [1, "jobs", "000000000000", ["a"]]
    for token in ("abc", "!!!", "eyJ4IjoxfQ", "W10", "x" * 5000, forged_digest):
        code, message = error_code(lambda t=token: client(controller).list_jobs(pb.ListJobsRequest(page_token=t)))
        assert code == "invalid_argument", token
        assert "next_page_token" in message or "other filters" in message, message


def test_a_token_of_another_list_or_other_filters_is_refused_and_changes_nothing(controller):
    c = client(controller)
    for i in range(3):
        launch(c, f"job-{i}", ["true"])
    workers_token = c.list_workers(pb.ListWorkersRequest(limit=1)).next_page_token
    jobs_token = c.list_jobs(pb.ListJobsRequest(limit=1, user="alice")).next_page_token
    assert workers_token and jobs_token
    code, message = error_code(lambda: c.list_jobs(pb.ListJobsRequest(page_token=workers_token)))
    assert code == "invalid_argument" and "another list" in message
    code, message = error_code(lambda: c.list_jobs(pb.ListJobsRequest(user="bob", page_token=jobs_token)))
    assert code == "invalid_argument" and "other filters" in message
    code, _ = error_code(lambda: c.list_tasks(pb.ListTasksRequest(job_id="/alice/job-0", page_token=jobs_token)))
    assert code == "invalid_argument"
    # The refused calls changed nothing: the same token still continues its own listing.
    rest = c.list_jobs(pb.ListJobsRequest(limit=5, user="alice", page_token=jobs_token))
    assert [j.job_id for j in rest.jobs] == ["/alice/job-1", "/alice/job-0"] and rest.total == 3


def test_an_attempt_holds_at_most_its_share_of_endpoints(controller):
    from iris.controller.api.endpoints import MAX_ENDPOINTS_PER_ATTEMPT

    c = client(controller)
    job = launch(c, "many-endpoints", ["sleep", "60"])
    attempt = wait_state(c, job, states=("RUNNING",)).tasks[0].attempts[0].attempt_id

    def register(name: str, port: int = 9000):
        c.register_endpoint(pb.RegisterEndpointRequest(job_id=job, attempt_id=attempt, name=name, port=port))

    for i in range(MAX_ENDPOINTS_PER_ATTEMPT):
        register(f"e{i}")
    code, message = error_code(lambda: register("one-more"))
    assert code == "failed_precondition" and "the most one attempt may" in message, message
    register("e0", 9001)  # moving one it holds is fine
    assert c.list_endpoints(pb.ListEndpointsRequest(job_id=job)).total == MAX_ENDPOINTS_PER_ATTEMPT
    c.terminate_job(pb.TerminateJobRequest(job_id=job))
