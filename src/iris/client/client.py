"""IrisClient: the Python SDK for one controller, and the layer the `iris` CLI is built on.

Every method returns the API's protobuf messages (fields documented in `iris/rpc/controller.proto`),
except `submit`, which returns the job id. Errors are the typed errors of `iris.core.errors`: an
unreachable controller is `Unavailable`, an unknown job `NotFound`, bad input `InvalidArgument`.

The generated messages are imported on first use, not with this module: `iris job run --no-wait`
submits through `prepare_json` and `launch_json`, which build and read Connect JSON documents, and
so never loads the protobuf runtime.

Inside a task (`IRIS_JOB_ID` set by the backend) `submit` nests new jobs under the task's job by
default, so a driver task's sub-jobs are its children: they inherit its env and region, and stopping
it stops them.
"""

from __future__ import annotations

import builtins
import os
import time

from iris.client.launch import build_launch_request
from iris.client.tokens import token_subject
from iris.rpc.transport import ClientTls, ConnectTransport, repeated_page_token, unreachable

TYPE_CHECKING = False  # typing's own constant costs `import typing` (4 ms) on the CLI's submit path
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
    from typing import Any

    from google.protobuf.message import Message

    from iris.core import errors
    from iris.core.constraints import Constraint
    from iris.rpc import controller_pb2 as pb
else:

    class _Messages:
        """Stands for `iris.rpc.controller_pb2` until a method first needs a message, then is replaced by it."""

        def __getattr__(self, name: str) -> Any:
            global pb
            from iris.rpc import controller_pb2 as pb

            return getattr(pb, name)

    pb = _Messages()

DEFAULT_URL = "http://127.0.0.1:10000"
# The terminal JobState values (iris.core.states), spelled out: the CLI's submit path skips that import.
TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "KILLED", "UNSCHEDULABLE"})
# Poll fast at first (a `true` job finishes in tens of milliseconds), then back off so a long job
# costs the controller five calls a second, not a hundred.
POLL_FIRST_S = 0.01
POLL_MAX_S = 0.2
POLL_GROWTH = 1.5
MAX_WAIT_MS = 60_000  # the longest the controller holds one status call (`status(wait_while=...)`)


def default_url() -> str:
    return os.environ.get("IRIS_CONTROLLER") or DEFAULT_URL


def tls_from_env() -> ClientTls:
    """How an https controller is checked when nothing else says: $IRIS_CA (a PEM file of the CAs
    that may sign its certificate; unset: the system's store), and the client certificate
    $IRIS_CLIENT_CERT with its key $IRIS_CLIENT_KEY, for a controller that asks for one."""
    env = os.environ
    return ClientTls(env.get("IRIS_CA", ""), env.get("IRIS_CLIENT_CERT", ""), env.get("IRIS_CLIENT_KEY", ""))


class IrisClient:
    """A connection to one controller. Safe to share between threads."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        timeout: float = 30.0,
        on_unreachable: Callable[[str, str], errors.IrisError] | None = None,
        tls: ClientTls | None = None,
    ):
        """`on_unreachable(url, reason)` makes the error a call raises when the controller does not
        answer at all (by default one saying how to start a local cluster). `tls`: how an https
        controller's certificate is checked, and the client certificate to present (default:
        `tls_from_env`)."""
        self._transport = ConnectTransport(
            url or default_url(),
            token if token is not None else os.environ.get("IRIS_TOKEN"),
            timeout,
            on_unreachable=on_unreachable or unreachable,
            tls=tls if tls is not None else tls_from_env(),
        )
        self._bundles: dict[str, Any] = {}  # content id -> Bundle packed by prepare, until sent
        # One long poll of `wait` stays well inside the transport's timeout.
        self._long_poll_s = max(0.1, min(10.0, timeout / 2))

    @property
    def url(self) -> str:
        return self._transport.url

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> IrisClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"IrisClient({self.url!r})"

    # -- submitting -----------------------------------------------------------------------------

    def prepare(
        self,
        command: str | Sequence[str],
        *,
        name: str | None = None,
        user: str | None = None,
        cpu: float | None = None,
        memory: str | int | None = None,
        disk: str | int | None = None,
        gpu: str | None = None,
        tpu: str | None = None,
        replicas: int = 1,
        priority: str | None = None,
        constraints: Iterable[str | Constraint] = (),
        region: str | None = None,
        zone: str | None = None,
        target_cluster: str | None = None,
        env: Mapping[str, str] | None = None,
        max_retries: int = 0,
        max_retries_preemption: int | None = None,
        timeout: float | str | None = None,
        scheduling_timeout: float | str | None = None,
        coschedule: bool = False,
        existing_job_policy: str = "error",
        parent: str | None = None,
        workdir: str | None = None,
        image: str | None = None,
    ) -> pb.LaunchJobRequest:
        """Validates a job's options and returns the LaunchJobRequest that `launch` would send.

        `command` is an argv list, or a string run by `/bin/sh -c`. Sizes take `8G`, durations
        `30s`/`5m`, `gpu` takes `H100x8`/`8`/`H100`, `tpu` a slice name (`v5p-8`), `constraints`
        their text form (`region=us-east5`, `gpu-count>=4`). `region="any"` opts a child out of its
        parent's region. `parent=None` means the job of the task this runs in (`IRIS_JOB_ID`), if
        any; pass `parent=""` to submit a root job from a task. A `name` starting with '/' is a
        full job id; without a name the controller generates one. `image` runs each task in that
        container image (on workers started with `--runtime docker`).

        `workdir` is a folder to ship as the job's workspace (its tasks run in a copy of it; what
        `.gitignore` and `.irisignore` list stays home). Without one, a job submitted from a task
        runs in its parent's workspace, and any other job in an empty folder.
        """
        document = self.prepare_json(
            command,
            name=name,
            user=user,
            cpu=cpu,
            memory=memory,
            disk=disk,
            gpu=gpu,
            tpu=tpu,
            replicas=replicas,
            priority=priority,
            constraints=constraints,
            region=region,
            zone=zone,
            target_cluster=target_cluster,
            env=env,
            max_retries=max_retries,
            max_retries_preemption=max_retries_preemption,
            timeout=timeout,
            scheduling_timeout=scheduling_timeout,
            coschedule=coschedule,
            existing_job_policy=existing_job_policy,
            parent=parent,
            workdir=workdir,
            image=image,
        )
        return pb.LaunchJobRequest(**document)

    def prepare_json(self, command: str | Sequence[str], **options: Any) -> dict[str, Any]:
        """The LaunchJobRequest `prepare` returns (options as for it), as its JSON document.

        The document is Connect JSON (in the message's own field names) and the message's keyword
        arguments at once; see `iris.client.launch`. A `workdir` is packed here and named by its
        content id only: its bytes travel only if the controller answers that it lacks them.
        """
        workdir = options.pop("workdir", None)
        if workdir:
            from iris.client.bundle import build_bundle

            bundle = build_bundle(workdir)
            if bundle.files:  # an empty folder ships nothing
                self._bundles[bundle.content_id] = bundle
                options["bundle_id"] = bundle.content_id
        name = options.get("name")
        if options.get("parent") is None and not (name or "").startswith("/"):
            options["parent"] = os.environ.get("IRIS_JOB_ID") or ""
        if options.get("user") is None:
            options["user"] = token_subject(self._transport.token)  # a user token submits as its own user
        return build_launch_request(command, **options)

    def launch(self, command: str | Sequence[str], **options: Any) -> pb.LaunchJobResponse:
        """Submits a job (options as for `prepare`); returns the job id, state and disposition."""
        return self.launch_request(self.prepare(command, **options))

    def submit(self, command: str | Sequence[str], **options: Any) -> str:
        """Submits a job (options as for `prepare`) and returns its id, e.g. `/alice/train`."""
        return self.launch(command, **options).job_id

    def launch_request(self, request: pb.LaunchJobRequest) -> pb.LaunchJobResponse:
        """Sends a LaunchJobRequest; a workspace the controller lacks is resent with its bytes."""
        reply = self._transport.call("LaunchJob", request, pb.LaunchJobResponse)
        if reply.bundle_missing:
            full = pb.LaunchJobRequest()
            full.CopyFrom(request)
            full.workspace_bundle = self._bundle_bytes(request.bundle_id)
            reply = self._transport.call("LaunchJob", full, pb.LaunchJobResponse)
        self._bundles.pop(request.bundle_id, None)
        return reply

    def launch_json(self, request: dict[str, Any]) -> dict[str, Any]:
        """Sends a LaunchJobRequest given as its Connect JSON document (see `prepare_json`).

        Returns the LaunchJobResponse's document, e.g. {"jobId": "/alice/train", "state": "PENDING",
        "disposition": "local"}; fields at their default value are absent, as Connect JSON omits them.
        When the request names a workspace, the client adds "uploadedBytes": how many bytes of it
        had to be sent (0 when the controller held it already).
        """
        reply = self._transport.call_json("LaunchJob", request)
        bundle_id = request.get("bundle_id") or ""
        if not bundle_id:
            return reply
        uploaded = 0
        if reply.get("bundleMissing"):
            import base64

            data = self._bundle_bytes(bundle_id)
            reply = self._transport.call_json(
                "LaunchJob", {**request, "workspace_bundle": base64.b64encode(data).decode("ascii")}
            )
            uploaded = len(data)
        self._bundles.pop(bundle_id, None)
        return {**reply, "uploadedBytes": uploaded}

    def plan(self, command: str | Sequence[str], **options: Any) -> pb.PlanJobResponse:
        """What `launch` of the same job (options as for `prepare`) would meet now, writing nothing:
        refused with the error `launch` would raise, or answered with where it would go (this
        cluster's backends, or the federation peer it would be handed to), whether it would start
        now or wait (with its expected start and pending reason), the running jobs it would
        preempt, and the band its owner's budget puts it in. See `iris job run --dry-run`.

        A `workdir` is neither packed nor sent: the workspace changes nothing of the answer."""
        options.pop("workdir", None)
        return self.plan_request(self.prepare(command, **options))

    def plan_request(self, request: pb.LaunchJobRequest) -> pb.PlanJobResponse:
        """A dry run of a prepared LaunchJobRequest (see `plan`)."""
        return self._transport.call("PlanJob", request, pb.PlanJobResponse)

    def plan_json(self, request: dict[str, Any]) -> dict[str, Any]:
        """A dry run of a LaunchJobRequest given as its Connect JSON document (see `prepare_json`);
        returns the PlanJobResponse's document (fields at their default value absent)."""
        return self._transport.call_json("PlanJob", request)

    def _bundle_bytes(self, bundle_id: str) -> bytes:
        bundle = self._bundles.get(bundle_id)
        if bundle is None:
            from iris.core.errors import FailedPrecondition

            raise FailedPrecondition(
                f"the controller does not hold workspace {bundle_id} and this client did not pack it;"
                " pass workdir=FOLDER to submit so it is packed and sent"
            )
        return bundle.data

    def bundle(self, bundle_id: str):  # -> iris.client.bundle.Bundle | None
        """The workspace bundle packed for a prepared request, until that request is sent."""
        return self._bundles.get(bundle_id)

    # -- watching -------------------------------------------------------------------------------

    def status(self, job: str, *, wait_while: str = "", wait_s: float = 0.0) -> pb.JobStatus:
        """The job's status. With `wait_while` (a job state), the controller answers once the job has
        left that state, or after `wait_s` seconds (at most 60), whichever comes first: one call
        instead of polling while a job starts or runs."""
        request = pb.GetJobStatusRequest(job_id=job)
        if wait_while:
            request.wait_while_state = wait_while
            request.wait_ms = max(0, min(int(wait_s * 1000), MAX_WAIT_MS))
        return self._transport.call("GetJobStatus", request, pb.GetJobStatusResponse).job

    def describe(self, job: str, *, all_tasks: bool = False) -> pb.GetJobStatusResponse:
        """The job with its first page of tasks (`total_tasks` counts them all) and each task's
        latest attempts; with `all_tasks`, every task, fetched a page at a time."""
        resp = self._transport.call(
            "GetJobStatus",
            pb.GetJobStatusRequest(job_id=job, include_tasks=True, include_attempts=True),
            pb.GetJobStatusResponse,
        )
        if all_tasks and resp.next_task_page_token:
            request = pb.ListTasksRequest(job_id=job, include_attempts=True, page_token=resp.next_task_page_token)
            resp.tasks.extend(self._pages("ListTasks", request, pb.ListTasksResponse, "tasks"))
            resp.next_task_page_token = ""
        return resp

    def tasks(self, job: str, include_attempts: bool = False) -> list[pb.TaskStatus]:
        """Every task of the job by index (with each one's latest attempts when asked)."""
        return list(self.iter_tasks(job, include_attempts))

    def iter_tasks(self, job: str, include_attempts: bool = False, page_size: int = 0) -> Iterator[pb.TaskStatus]:
        """The job's tasks by index, fetched a page at a time (`page_size` 0: the server's default)."""
        request = pb.ListTasksRequest(job_id=job, include_attempts=include_attempts, limit=page_size)
        return self._pages("ListTasks", request, pb.ListTasksResponse, "tasks")

    def _pages(self, method: str, request: Any, response_type: Any, field: str) -> Iterator[Any]:
        """Every item of a paged list: calls `method` again with each page's next_page_token until
        the last page. A token the controller sent before ends it with an error, not a loop."""
        seen: set[str] = set()
        while True:
            resp = self._transport.call(method, request, response_type)
            items = getattr(resp, field)
            yield from items
            if not resp.next_page_token or not items:
                return
            if resp.next_page_token in seen:
                from iris.core.errors import IrisError

                raise IrisError(repeated_page_token(method, resp.next_page_token))
            seen.add(resp.next_page_token)
            request.page_token = resp.next_page_token

    def wait(self, job: str, timeout: float | None = None) -> pb.JobStatus:
        """Blocks until the job is terminal and returns its final status; TimeoutError after `timeout` s
        (None or 0: no limit, as a job's own timeout).

        Each call waits on the controller while the job stays in the state last seen (a long poll),
        so the end is seen as soon as the controller has stored it. A controller too old to wait
        answers at once; then the calls are spaced out as a poll would be."""
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout must be 0 (no limit) or more seconds, got {timeout:g}")
        deadline = time.monotonic() + timeout if timeout else None
        delay = POLL_FIRST_S
        status = self.status(job)
        while status.state not in TERMINAL_STATES:
            wait_s = self._long_poll_s
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"job {job} is still {status.state} after {timeout:g}s")
                wait_s = min(wait_s, remaining)
            asked = time.monotonic()
            seen = status.state
            status = self.status(job, wait_while=seen, wait_s=wait_s)
            if status.state == seen and time.monotonic() - asked < wait_s / 2:
                time.sleep(min(delay, wait_s))  # it did not wait: an older controller
                delay = min(delay * POLL_GROWTH, POLL_MAX_S)
        return status

    def list(
        self,
        state: str | None = None,
        prefix: str | None = None,
        user: str | None = None,
        limit: int = 0,
        *,
        cluster: str | None = None,
        parent: str | None = None,
    ) -> list[pb.JobStatus]:
        """One page of jobs (`limit` of them; 0: the server's default page), newest first as the
        controller orders them; `state`, `prefix`, `user`, `cluster` (where they run: this cluster's
        name or a peer's) and `parent` (direct children of that job) filter. `iter_jobs` gives them all."""
        return list(self.job_page(state, prefix, user, limit, cluster=cluster, parent=parent).jobs)

    def job_page(
        self,
        state: str | None = None,
        prefix: str | None = None,
        user: str | None = None,
        limit: int = 0,
        *,
        cluster: str | None = None,
        parent: str | None = None,
        page_token: str = "",
    ) -> pb.ListJobsResponse:
        """One ListJobs page as the controller answers it: the jobs, `next_page_token` ("" at the
        end) and `total`, the count of every job the filters match."""
        request = pb.ListJobsRequest(
            state=(state or "").upper(),
            prefix=prefix or "",
            user=user or "",
            limit=limit,
            cluster=cluster or "",
            parent_job_id=parent or "",
            page_token=page_token,
        )
        return self._transport.call("ListJobs", request, pb.ListJobsResponse)

    def iter_jobs(
        self,
        state: str | None = None,
        prefix: str | None = None,
        user: str | None = None,
        *,
        cluster: str | None = None,
        parent: str | None = None,
        page_size: int = 0,
    ) -> Iterator[pb.JobStatus]:
        """Every job matching the filters, newest first, fetched a page at a time (`page_size` 0:
        the server's default). Jobs submitted while it pages are not included, and no job that
        existed when it started is skipped or repeated."""
        request = pb.ListJobsRequest(
            state=(state or "").upper(),
            prefix=prefix or "",
            user=user or "",
            limit=page_size,
            cluster=cluster or "",
            parent_job_id=parent or "",
        )
        return self._pages("ListJobs", request, pb.ListJobsResponse, "jobs")

    @property
    def token(self) -> str | None:
        """The bearer token this client sends (None: none)."""
        return self._transport.token

    # -- logs -----------------------------------------------------------------------------------

    def fetch_logs(
        self,
        job: str,
        *,
        task: int | None = None,
        after_seq: int = 0,
        tail: int = 0,
        limit: int = 0,
        wait_s: float = 0.0,
    ) -> pb.FetchLogsResponse:
        """One FetchLogs call: lines after `after_seq` (or the last `tail`), and whether the job is over.
        With `wait_s`, when there is no such line yet and the job is not over, the controller
        answers once there is one or the job ends, or after `wait_s` seconds (at most 60)."""
        request = pb.FetchLogsRequest(
            job_id=job,
            task_index=-1 if task is None else task,
            after_seq=after_seq,
            tail=tail,
            limit=limit,
            wait_ms=max(0, min(int(wait_s * 1000), MAX_WAIT_MS)),
        )
        return self._transport.call("FetchLogs", request, pb.FetchLogsResponse)

    def last_seq(self, job: str, *, task: int | None = None) -> int:
        """The seq of the newest line stored for the job (or one task), 0 when there is none."""
        return max((line.seq for line in self.fetch_logs(job, task=task, tail=1).lines), default=0)

    def logs(self, job: str, *, task: int | None = None, tail: int = 0) -> builtins.list[pb.LogLine]:
        """Every stored line of the job (or of one task), or only the last `tail` lines."""
        if tail > 0:
            return list(self.fetch_logs(job, task=task, tail=tail).lines)
        lines: list[pb.LogLine] = []
        after = 0
        while True:
            batch = self.fetch_logs(job, task=task, after_seq=after).lines
            if not batch:
                return lines
            lines.extend(batch)
            after = max(after, max(line.seq for line in batch))

    def follow(self, job: str, *, task: int | None = None, tail: int = 0, after_seq: int = 0) -> Iterator[pb.LogLine]:
        """Yields the job's lines as they are written, until the job is terminal and all are read.

        With `tail`, starts from the last `tail` lines instead of the first line; with `after_seq`,
        from the first line after that one (`last_seq` names the newest stored line).
        """
        after = after_seq
        delay = POLL_FIRST_S
        first = True
        while True:
            # Each call waits on the controller for a line or the end (a long poll).
            asked = time.monotonic()
            wait_s = self._long_poll_s
            resp = self.fetch_logs(
                job, task=task, after_seq=after, tail=tail if first and tail > 0 else 0, wait_s=wait_s
            )
            first = False
            yield from resp.lines
            if resp.lines:
                after = max(after, max(line.seq for line in resp.lines))
                delay = POLL_FIRST_S
                continue
            if resp.job_finished:
                return
            if time.monotonic() - asked < wait_s / 2:
                time.sleep(delay)  # it did not wait: an older controller
                delay = min(delay * POLL_GROWTH, POLL_MAX_S)

    # -- acting ---------------------------------------------------------------------------------

    def cancel(self, job: str, reason: str = "") -> pb.TerminateJobResponse:
        """Stops the job and every job below it; the response names each job that was stopped."""
        return self._transport.call(
            "TerminateJob", pb.TerminateJobRequest(job_id=job, reason=reason), pb.TerminateJobResponse
        )

    def explain(self, job: str) -> pb.ExplainJobResponse:
        """Why the job does or does not fit, per backend and group of identical workers."""
        return self._transport.call("ExplainJob", pb.ExplainJobRequest(job_id=job), pb.ExplainJobResponse)

    # -- the cluster ----------------------------------------------------------------------------

    def query(self, sql: str, limit: int = 0) -> pb.ExecuteRawQueryResponse:
        """Runs a read-only SQL statement against the controller's database."""
        return self._transport.call(
            "ExecuteRawQuery", pb.ExecuteRawQueryRequest(sql=sql, limit=limit), pb.ExecuteRawQueryResponse
        )

    def backends(self) -> pb.ListBackendsResponse:
        """Every backend of the cluster (all pages, in one response)."""
        first = self._transport.call("ListBackends", pb.ListBackendsRequest(), pb.ListBackendsResponse)
        if first.next_page_token:
            rest = pb.ListBackendsRequest(page_token=first.next_page_token)
            first.backends.extend(self._pages("ListBackends", rest, pb.ListBackendsResponse, "backends"))
            first.next_page_token = ""
        return first

    def workers(self, backend: str | None = None) -> builtins.list[pb.WorkerInfo]:
        """Every worker (of one backend, or of all), by backend and worker id."""
        return list(self.iter_workers(backend))

    def iter_workers(self, backend: str | None = None, page_size: int = 0) -> Iterator[pb.WorkerInfo]:
        """The workers, fetched a page at a time (`page_size` 0: the server's default)."""
        request = pb.ListWorkersRequest(backend_id=backend or "", limit=page_size)
        return self._pages("ListWorkers", request, pb.ListWorkersResponse, "workers")

    def peers(self) -> builtins.list[pb.PeerInfo]:
        """Every federation peer of the cluster, by peer id."""
        return list(self._pages("ListPeers", pb.ListPeersRequest(), pb.ListPeersResponse, "peers"))

    def inbound_peers(self) -> builtins.list[pb.InboundPeer]:
        """Every cluster that hands jobs to this one (or may: its key is trusted), by peer id."""
        resp = self._transport.call("ListPeers", pb.ListPeersRequest(limit=1), pb.ListPeersResponse)
        return list(resp.inbound)

    def cluster_info(self) -> pb.GetClusterInfoResponse:
        return self._transport.call("GetClusterInfo", pb.GetClusterInfoRequest(), pb.GetClusterInfoResponse)

    # -- serving endpoints ----------------------------------------------------------------------

    def register_endpoint(
        self, name: str, port: int, host: str | None = None, *, job: str | None = None, attempt: str | None = None
    ) -> pb.Endpoint:
        """From inside a task: announces that this attempt serves `name` on `host:port` (host defaults
        to $IRIS_ENDPOINT_HOST, else the host the attempt runs on). The endpoint lives until the attempt ends."""
        job = job or os.environ.get("IRIS_JOB_ID", "")
        attempt = attempt or os.environ.get("IRIS_ATTEMPT_ID", "")
        if not job or not attempt:
            from iris.core.errors import InvalidArgument

            raise InvalidArgument(
                "register_endpoint runs inside a task (IRIS_JOB_ID and IRIS_ATTEMPT_ID are unset); pass job= and attempt="
            )
        request = pb.RegisterEndpointRequest(
            job_id=job,
            attempt_id=attempt,
            name=name,
            host=host or os.environ.get("IRIS_ENDPOINT_HOST", ""),
            port=port,
        )
        return self._transport.call("RegisterEndpoint", request, pb.RegisterEndpointResponse).endpoint

    def endpoints(self, job: str = "") -> builtins.list[pb.Endpoint]:
        """The live endpoints of `job` (every job's when empty), by job and name."""
        return list(self.iter_endpoints(job))

    def iter_endpoints(self, job: str = "", page_size: int = 0) -> Iterator[pb.Endpoint]:
        """The live endpoints, fetched a page at a time (`page_size` 0: the server's default)."""
        request = pb.ListEndpointsRequest(job_id=job, limit=page_size)
        return self._pages("ListEndpoints", request, pb.ListEndpointsResponse, "endpoints")

    def endpoint_url(self, job: str, name: str, ttl_s: float = 0) -> pb.MintEndpointUrlResponse:
        """A capability URL that reaches endpoint `name` of `job` for `ttl_s` seconds (0: 8 hours)."""
        request = pb.MintEndpointUrlRequest(job_id=job, name=name, ttl_s=ttl_s)
        return self._transport.call("MintEndpointUrl", request, pb.MintEndpointUrlResponse)

    def call(self, method: str, request: Message) -> Message:
        """Calls any ControllerService method by its proto name (e.g. "ListPeers")."""
        descriptor = pb.DESCRIPTOR.services_by_name["ControllerService"].methods_by_name.get(method)
        if descriptor is None:
            from iris.core.errors import InvalidArgument

            raise InvalidArgument(f"ControllerService has no method {method!r}")
        response_type = getattr(pb, descriptor.output_type.name)
        return self._transport.call(method, request, response_type)
