"""An in-memory ControllerService served over real HTTP, for unit tests of the SDK and the CLI.

It speaks the real Connect protocol (the generated ASGI application under uvicorn), runs each job's
command as a real subprocess per replica and records its output as log lines, so the client's
transport, polling, log following and error mapping are exercised against the same wire format as
the real controller. The scheduling is deliberately trivial: a task needing more than
`MAX_CPU` cores is UNSCHEDULABLE; everything else runs at once.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field

import uvicorn
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from iris.rpc import controller_pb2 as pb
from iris.rpc.controller_connect import ControllerServiceASGIApplication

MAX_CPU = 64.0


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class FakeJob:
    status: pb.JobStatus
    tasks: list[pb.TaskStatus] = field(default_factory=list)
    logs: list[pb.LogLine] = field(default_factory=list)
    procs: list[subprocess.Popen] = field(default_factory=list)


class FakeService:
    def __init__(self) -> None:
        self.jobs: dict[str, FakeJob] = {}
        self.lock = threading.Lock()
        self.seq = 0
        self.requests: list[pb.LaunchJobRequest] = []
        self.authorizations: list[str | None] = []

    # -- helpers --
    def _job(self, job_id: str) -> FakeJob:
        job = self.jobs.get(job_id)
        if job is None:
            raise ConnectError(Code.NOT_FOUND, f"job {job_id} not found")
        return job

    def _log(self, job: FakeJob, index: int, stream: str, text: str) -> None:
        with self.lock:
            self.seq += 1
            job.logs.append(
                pb.LogLine(seq=self.seq, task_index=index, attempt=0, stream=stream, ts_ms=now_ms(), text=text)
            )

    def _derive(self, job: FakeJob) -> None:
        states = [t.state for t in job.tasks]
        st = job.status
        st.task_counts.clear()
        for s in states:
            st.task_counts[s] = st.task_counts.get(s, 0) + 1
        if all(s == "SUCCEEDED" for s in states):
            st.state = "SUCCEEDED"
        elif "FAILED" in states:
            st.state = "FAILED"
        elif "UNSCHEDULABLE" in states:
            st.state = "UNSCHEDULABLE"
        elif "KILLED" in states:
            st.state = "KILLED"
        elif "RUNNING" in states:
            st.state = "RUNNING"
        else:
            st.state = "PENDING"
        if st.state in ("SUCCEEDED", "FAILED", "KILLED", "UNSCHEDULABLE") and not st.finished_ms:
            st.finished_ms = now_ms()

    def _run(self, job: FakeJob, index: int, argv: list[str], env: dict[str, str]) -> None:
        import os

        task = job.tasks[index]
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **env, "IRIS_JOB_ID": job.status.job_id, "IRIS_TASK_INDEX": str(index)},
            start_new_session=True,
        )
        job.procs.append(proc)
        assert proc.stdout is not None
        for line in proc.stdout:
            self._log(job, index, "stdout", line.rstrip("\n"))
        code = proc.wait()
        with self.lock:
            if task.state == "KILLED":
                return
            task.state = "SUCCEEDED" if code == 0 else "FAILED"
            task.exit_code = code
            task.has_exit_code = True
            task.finished_ms = now_ms()
            task.attempts[0].state = task.state
            task.attempts[0].exit_code = code
            task.attempts[0].has_exit_code = True
            task.attempts[0].finished_ms = task.finished_ms
            job.status.exit_code = code
            job.status.has_exit_code = True
            self._derive(job)

    # -- RPCs --
    async def launch_job(self, request: pb.LaunchJobRequest, ctx) -> pb.LaunchJobResponse:
        self.requests.append(request)
        self.authorizations.append(ctx.request_headers.get("authorization"))
        if request.parent_job_id:
            job_id = f"{request.parent_job_id}/{request.name or 'child'}"
        elif request.name.startswith("/"):
            job_id = request.name
        else:
            job_id = f"/{request.user}/{request.name or f'job-{len(self.jobs) + 1}'}"
        if job_id in self.jobs:
            if request.existing_job_policy == "keep":
                st = self.jobs[job_id].status
                return pb.LaunchJobResponse(job_id=job_id, state=st.state, disposition="existing")
            raise ConnectError(Code.ALREADY_EXISTS, f"job {job_id} already exists; pass --existing replace or keep")
        status = pb.JobStatus(
            job_id=job_id,
            state="PENDING",
            user=request.user,
            priority=request.priority or "interactive",
            cluster="fake",
            replicas=request.replicas or 1,
            submitted_ms=now_ms(),
            resources=request.resources,
            command=request.command,
            constraints=request.constraints,
            parent_job_id=request.parent_job_id,
        )
        job = FakeJob(status)
        unschedulable = request.resources.cpu > MAX_CPU
        for i in range(status.replicas):
            job.tasks.append(
                pb.TaskStatus(
                    task_id=f"{job_id}/{i}",
                    job_id=job_id,
                    index=i,
                    state="UNSCHEDULABLE" if unschedulable else "RUNNING",
                    backend_id="local",
                    worker_id="local-0",
                    started_ms=0 if unschedulable else now_ms(),
                    error=f"needs {request.resources.cpu:g} cpu; the largest worker has {MAX_CPU:g}"
                    if unschedulable
                    else "",
                    attempts=[]
                    if unschedulable
                    else [
                        pb.AttemptStatus(
                            attempt_id=f"{job_id}/{i}:0",
                            state="RUNNING",
                            backend_id="local",
                            worker_id="local-0",
                            started_ms=now_ms(),
                        )
                    ],
                )
            )
        if unschedulable:
            status.error = job.tasks[0].error
        else:
            status.started_ms = now_ms()
        self._derive(job)
        self.jobs[job_id] = job
        # The answer is the state at admission: a task started below may end before it is sent.
        answered = status.state
        if not unschedulable:
            for i in range(status.replicas):
                threading.Thread(
                    target=self._run, args=(job, i, list(request.command), dict(request.env)), daemon=True
                ).start()
        return pb.LaunchJobResponse(job_id=job_id, state=answered, disposition="local")

    async def get_job_status(self, request: pb.GetJobStatusRequest, ctx) -> pb.GetJobStatusResponse:
        job = self._job(request.job_id)
        with self.lock:
            return pb.GetJobStatusResponse(job=job.status, tasks=job.tasks if request.include_tasks else [])

    async def list_jobs(self, request: pb.ListJobsRequest, ctx) -> pb.ListJobsResponse:
        with self.lock:
            jobs = [
                j.status
                for j in self.jobs.values()
                if (not request.state or j.status.state == request.state) and j.status.job_id.startswith(request.prefix)
            ]
        return pb.ListJobsResponse(jobs=list(reversed(jobs)))

    async def list_tasks(self, request: pb.ListTasksRequest, ctx) -> pb.ListTasksResponse:
        return pb.ListTasksResponse(tasks=self._job(request.job_id).tasks)

    async def terminate_job(self, request: pb.TerminateJobRequest, ctx) -> pb.TerminateJobResponse:
        job = self._job(request.job_id)
        with self.lock:
            for task in job.tasks:
                if task.state in ("PENDING", "RUNNING"):
                    task.state = "KILLED"
            self._derive(job)
        for proc in job.procs:
            if proc.poll() is None:
                proc.kill()
        return pb.TerminateJobResponse(terminated=[request.job_id], state=job.status.state)

    async def fetch_logs(self, request: pb.FetchLogsRequest, ctx) -> pb.FetchLogsResponse:
        job = self._job(request.job_id)
        with self.lock:
            finished = job.status.state in ("SUCCEEDED", "FAILED", "KILLED", "UNSCHEDULABLE")
            lines = [
                line
                for line in job.logs
                if line.seq > request.after_seq and (request.task_index < 0 or line.task_index == request.task_index)
            ]
        if request.tail > 0:
            lines = lines[-request.tail :]
        return pb.FetchLogsResponse(
            lines=lines,
            next_seq=lines[-1].seq if lines else request.after_seq,
            job_finished=finished,
            job_state=job.status.state,
        )

    async def list_backends(self, request, ctx) -> pb.ListBackendsResponse:
        return pb.ListBackendsResponse(
            cluster="fake",
            backends=[
                pb.BackendInfo(
                    id="local",
                    kind="local",
                    workers=1,
                    worker_capacity=pb.Resources(cpu=MAX_CPU, memory_bytes=8 << 30),
                    availability=pb.Availability(
                        version=1, observation_epoch_ms=now_ms(), amounts={"cpu": 60}, total_amounts={"cpu": 64}
                    ),
                )
            ],
        )

    async def list_workers(self, request, ctx) -> pb.ListWorkersResponse:
        return pb.ListWorkersResponse(workers=[pb.WorkerInfo(worker_id="local-0", backend_id="local", alive=True)])

    async def list_peers(self, request, ctx) -> pb.ListPeersResponse:
        return pb.ListPeersResponse(peers=[pb.PeerInfo(peer_id="cw", reachable=True)])

    async def execute_raw_query(self, request: pb.ExecuteRawQueryRequest, ctx) -> pb.ExecuteRawQueryResponse:
        if not request.sql.strip().lower().startswith("select"):
            raise ConnectError(Code.INVALID_ARGUMENT, "iris query is read-only; only SELECT statements are allowed")
        resp = pb.ExecuteRawQueryResponse(columns=["job_id", "state"])
        for j in self.jobs.values():
            row = resp.rows.add()
            row.extend([j.status.job_id, j.status.state])
        return resp

    async def plan_job(self, request: pb.LaunchJobRequest, ctx) -> pb.PlanJobResponse:
        """A dry run as trivial as this fake's scheduling: it would start now, or never."""
        job_id = request.name if request.name.startswith("/") else f"/{request.user}/{request.name or 'planned'}"
        band = request.priority or "interactive"
        answer = pb.PlanJobResponse(job_id=job_id, tasks=request.replicas or 1, band=band, requested_band=band)
        if request.resources.cpu > MAX_CPU:
            answer.disposition, answer.state = "rejected", "UNSCHEDULABLE"
            answer.message = answer.unschedulable = f"needs more than {MAX_CPU:g} cores"
            return answer
        answer.disposition, answer.state, answer.starts_now = "local", "PENDING", True
        answer.backend_ids.append("local")
        answer.worker_ids.extend(["local"] * answer.tasks)
        answer.tasks_placed = answer.tasks
        return answer

    async def explain_job(self, request: pb.ExplainJobRequest, ctx) -> pb.ExplainJobResponse:
        job = self._job(request.job_id)
        fits = job.status.state != "UNSCHEDULABLE"
        return pb.ExplainJobResponse(
            job_id=request.job_id,
            summary="fits on local" if fits else "fits nowhere",
            groups=[
                pb.ExplainGroup(
                    backend_id="local",
                    group=f"cpu={MAX_CPU:g}",
                    workers=1,
                    verdict="fits" if fits else "blocked",
                    reasons=[] if fits else [job.status.error],
                )
            ],
        )

    async def get_cluster_info(self, request, ctx) -> pb.GetClusterInfoResponse:
        counts: dict[str, int] = {}
        for j in self.jobs.values():
            counts[j.status.state] = counts.get(j.status.state, 0) + 1
        return pb.GetClusterInfoResponse(
            name="fake",
            version="0.1.0",
            revision_date="2026-11-29",
            uptime_s=1.5,
            job_counts=counts,
            backends=1,
            pid=0,
            state_dir="/tmp/fake",
            healthy=True,
            last_tick_age_s=0.2,
        )

    async def federation_sync(self, request, ctx) -> pb.FederationSyncResponse:
        raise ConnectError(Code.UNIMPLEMENTED, "no federation here")

    async def hand_off_jobs(self, request, ctx) -> pb.HandOffJobsResponse:
        raise ConnectError(Code.UNIMPLEMENTED, "no federation here")

    async def register_worker(self, request, ctx) -> pb.RegisterWorkerResponse:
        raise ConnectError(Code.UNIMPLEMENTED, "no worker pools here")

    async def worker_poll(self, request, ctx) -> pb.WorkerPollResponse:
        raise ConnectError(Code.UNIMPLEMENTED, "no worker pools here")

    async def revoke_token(self, request, ctx) -> pb.RevokeTokenResponse:
        raise ConnectError(Code.UNIMPLEMENTED, "no token deny list here")

    async def fetch_bundle(self, request, ctx) -> pb.FetchBundleResponse:
        raise ConnectError(Code.UNIMPLEMENTED, "no bundles here")

    async def register_endpoint(self, request, ctx) -> pb.RegisterEndpointResponse:
        raise ConnectError(Code.UNIMPLEMENTED, "no serving endpoints here")

    async def list_endpoints(self, request, ctx) -> pb.ListEndpointsResponse:
        raise ConnectError(Code.UNIMPLEMENTED, "no serving endpoints here")

    async def mint_endpoint_url(self, request, ctx) -> pb.MintEndpointUrlResponse:
        raise ConnectError(Code.UNIMPLEMENTED, "no serving endpoints here")

    def stop_all(self) -> None:
        for job in self.jobs.values():
            for proc in job.procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()


class FakeController:
    """Serves a FakeService on a free loopback port in a background thread."""

    def __init__(self) -> None:
        self.service = FakeService()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            ControllerServiceASGIApplication(self.service),
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="off",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        asyncio.run(self.server.serve())

    def start(self) -> FakeController:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake controller did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.service.stop_all()
        self.server.should_exit = True
        self.thread.join(timeout=10)
