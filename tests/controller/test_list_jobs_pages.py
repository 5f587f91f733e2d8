"""ListJobs as the dashboard and scripts page through it: pages, totals, cluster and parent filters,
and GetClusterInfo saying who the caller is."""

from __future__ import annotations

from iris.client import IrisClient
from iris.rpc import controller_pb2 as pb
from tests.controller.helpers import client, error_code, launch, user_token, wait_state


def test_list_jobs_pages_newest_first_with_a_total_and_no_overlap(controller):
    c = client(controller)
    ids = [launch(c, f"job-{i}", ["true"]) for i in range(5)]
    seen, token, pages = [], "", 0
    while True:
        page = c.list_jobs(pb.ListJobsRequest(limit=2, page_token=token))
        assert page.total == 5
        seen += [j.job_id for j in page.jobs]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert seen == list(reversed(ids)) and pages == 3
    filtered = c.list_jobs(pb.ListJobsRequest(limit=1, prefix="/alice/job-1"))
    assert [j.job_id for j in filtered.jobs] == [ids[1]] and filtered.total == 1 and filtered.next_page_token == ""


def test_list_jobs_filters_by_cluster_and_parent(controller):
    c = client(controller)
    parent = launch(c, "parent", ["sleep", "60"])  # still running when its child is launched
    child = c.launch_job(pb.LaunchJobRequest(name="child", parent_job_id=parent, command=["true"])).job_id
    wait_state(c, child)
    here = c.list_jobs(pb.ListJobsRequest(cluster=controller.name))
    assert sorted(j.job_id for j in here.jobs) == sorted([parent, child])
    assert all(j.cluster == controller.name for j in here.jobs)
    assert c.list_jobs(pb.ListJobsRequest(cluster="some-peer")).total == 0
    children = c.list_jobs(pb.ListJobsRequest(parent_job_id=parent))
    assert [j.job_id for j in children.jobs] == [child] and children.jobs[0].parent_job_id == parent
    with IrisClient(controller.url) as sdk:
        assert [j.job_id for j in sdk.list(parent=parent, cluster=controller.name)] == [child]
        assert sdk.list(cluster="some-peer") == []


def test_list_jobs_refuses_a_page_token_it_never_gave(controller):
    code, message = error_code(lambda: client(controller).list_jobs(pb.ListJobsRequest(page_token="abc")))
    assert code == "invalid_argument" and "next_page_token" in message


def test_cluster_info_names_the_caller_and_its_role(controller):
    admin = client(controller).get_cluster_info(pb.GetClusterInfoRequest())
    assert admin.caller_role == "admin" and admin.caller
    viewer = client(controller, user_token(controller, "ops", role="dashboard"))
    info = viewer.get_cluster_info(pb.GetClusterInfoRequest())
    assert (info.caller, info.caller_role) == ("ops", "dashboard")
