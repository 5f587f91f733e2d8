from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Device(_message.Message):
    __slots__ = ("kind", "variant", "count", "topology")
    KIND_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    kind: str
    variant: str
    count: int
    topology: str
    def __init__(self, kind: _Optional[str] = ..., variant: _Optional[str] = ..., count: _Optional[int] = ..., topology: _Optional[str] = ...) -> None: ...

class Resources(_message.Message):
    __slots__ = ("cpu", "memory_bytes", "disk_bytes", "device")
    CPU_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    cpu: float
    memory_bytes: int
    disk_bytes: int
    device: Device
    def __init__(self, cpu: _Optional[float] = ..., memory_bytes: _Optional[int] = ..., disk_bytes: _Optional[int] = ..., device: _Optional[_Union[Device, _Mapping]] = ...) -> None: ...

class Constraint(_message.Message):
    __slots__ = ("key", "op", "values", "preferred")
    KEY_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    PREFERRED_FIELD_NUMBER: _ClassVar[int]
    key: str
    op: str
    values: _containers.RepeatedScalarFieldContainer[str]
    preferred: bool
    def __init__(self, key: _Optional[str] = ..., op: _Optional[str] = ..., values: _Optional[_Iterable[str]] = ..., preferred: _Optional[bool] = ...) -> None: ...

class HandoffRecord(_message.Message):
    __slots__ = ("requester_cluster", "owner_principal", "submitting_user", "nonce")
    REQUESTER_CLUSTER_FIELD_NUMBER: _ClassVar[int]
    OWNER_PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    SUBMITTING_USER_FIELD_NUMBER: _ClassVar[int]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    requester_cluster: str
    owner_principal: str
    submitting_user: str
    nonce: str
    def __init__(self, requester_cluster: _Optional[str] = ..., owner_principal: _Optional[str] = ..., submitting_user: _Optional[str] = ..., nonce: _Optional[str] = ...) -> None: ...

class LaunchJobRequest(_message.Message):
    __slots__ = ("name", "user", "command", "resources", "replicas", "priority", "constraints", "env", "max_retries_failure", "max_retries_preemption", "timeout_s", "scheduling_timeout_s", "coschedule", "existing_job_policy", "parent_job_id", "client_revision_date", "workspace_bundle", "workdir_files", "handoff", "workdir", "image", "bundle_id")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class WorkdirFilesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FAILURE_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_PREEMPTION_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    SCHEDULING_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    COSCHEDULE_FIELD_NUMBER: _ClassVar[int]
    EXISTING_JOB_POLICY_FIELD_NUMBER: _ClassVar[int]
    PARENT_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_REVISION_DATE_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_BUNDLE_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FILES_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    user: str
    command: _containers.RepeatedScalarFieldContainer[str]
    resources: Resources
    replicas: int
    priority: str
    constraints: _containers.RepeatedCompositeFieldContainer[Constraint]
    env: _containers.ScalarMap[str, str]
    max_retries_failure: int
    max_retries_preemption: int
    timeout_s: float
    scheduling_timeout_s: float
    coschedule: bool
    existing_job_policy: str
    parent_job_id: str
    client_revision_date: str
    workspace_bundle: bytes
    workdir_files: _containers.ScalarMap[str, bytes]
    handoff: HandoffRecord
    workdir: str
    image: str
    bundle_id: str
    def __init__(self, name: _Optional[str] = ..., user: _Optional[str] = ..., command: _Optional[_Iterable[str]] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., replicas: _Optional[int] = ..., priority: _Optional[str] = ..., constraints: _Optional[_Iterable[_Union[Constraint, _Mapping]]] = ..., env: _Optional[_Mapping[str, str]] = ..., max_retries_failure: _Optional[int] = ..., max_retries_preemption: _Optional[int] = ..., timeout_s: _Optional[float] = ..., scheduling_timeout_s: _Optional[float] = ..., coschedule: _Optional[bool] = ..., existing_job_policy: _Optional[str] = ..., parent_job_id: _Optional[str] = ..., client_revision_date: _Optional[str] = ..., workspace_bundle: _Optional[bytes] = ..., workdir_files: _Optional[_Mapping[str, bytes]] = ..., handoff: _Optional[_Union[HandoffRecord, _Mapping]] = ..., workdir: _Optional[str] = ..., image: _Optional[str] = ..., bundle_id: _Optional[str] = ...) -> None: ...

class LaunchJobResponse(_message.Message):
    __slots__ = ("job_id", "state", "disposition", "peer_id", "message", "bundle_missing")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DISPOSITION_FIELD_NUMBER: _ClassVar[int]
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_MISSING_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    state: str
    disposition: str
    peer_id: str
    message: str
    bundle_missing: bool
    def __init__(self, job_id: _Optional[str] = ..., state: _Optional[str] = ..., disposition: _Optional[str] = ..., peer_id: _Optional[str] = ..., message: _Optional[str] = ..., bundle_missing: _Optional[bool] = ...) -> None: ...

class PlannedPreemption(_message.Message):
    __slots__ = ("job_id", "task_id", "worker_id", "band")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    BAND_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_id: str
    worker_id: str
    band: str
    def __init__(self, job_id: _Optional[str] = ..., task_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., band: _Optional[str] = ...) -> None: ...

class PlanJobResponse(_message.Message):
    __slots__ = ("job_id", "disposition", "state", "message", "backend_ids", "worker_ids", "starts_now", "tasks", "tasks_placed", "pending_reason", "start_earliest_ms", "start_latest_ms", "start_basis", "unschedulable", "reserved_workers", "reserved_backend_id", "preemptions", "band", "requested_band", "spend", "budget", "over_budget", "timeout_s", "peer_id", "peer_backend_id", "peer_reclaims", "candidate_peers", "pinned_peer", "route")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    DISPOSITION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    BACKEND_IDS_FIELD_NUMBER: _ClassVar[int]
    WORKER_IDS_FIELD_NUMBER: _ClassVar[int]
    STARTS_NOW_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    TASKS_PLACED_FIELD_NUMBER: _ClassVar[int]
    PENDING_REASON_FIELD_NUMBER: _ClassVar[int]
    START_EARLIEST_MS_FIELD_NUMBER: _ClassVar[int]
    START_LATEST_MS_FIELD_NUMBER: _ClassVar[int]
    START_BASIS_FIELD_NUMBER: _ClassVar[int]
    UNSCHEDULABLE_FIELD_NUMBER: _ClassVar[int]
    RESERVED_WORKERS_FIELD_NUMBER: _ClassVar[int]
    RESERVED_BACKEND_ID_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    BAND_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_BAND_FIELD_NUMBER: _ClassVar[int]
    SPEND_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    OVER_BUDGET_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_BACKEND_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_RECLAIMS_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_PEERS_FIELD_NUMBER: _ClassVar[int]
    PINNED_PEER_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    disposition: str
    state: str
    message: str
    backend_ids: _containers.RepeatedScalarFieldContainer[str]
    worker_ids: _containers.RepeatedScalarFieldContainer[str]
    starts_now: bool
    tasks: int
    tasks_placed: int
    pending_reason: str
    start_earliest_ms: int
    start_latest_ms: int
    start_basis: str
    unschedulable: str
    reserved_workers: _containers.RepeatedScalarFieldContainer[str]
    reserved_backend_id: str
    preemptions: _containers.RepeatedCompositeFieldContainer[PlannedPreemption]
    band: str
    requested_band: str
    spend: int
    budget: float
    over_budget: bool
    timeout_s: float
    peer_id: str
    peer_backend_id: str
    peer_reclaims: float
    candidate_peers: _containers.RepeatedScalarFieldContainer[str]
    pinned_peer: str
    route: str
    def __init__(self, job_id: _Optional[str] = ..., disposition: _Optional[str] = ..., state: _Optional[str] = ..., message: _Optional[str] = ..., backend_ids: _Optional[_Iterable[str]] = ..., worker_ids: _Optional[_Iterable[str]] = ..., starts_now: _Optional[bool] = ..., tasks: _Optional[int] = ..., tasks_placed: _Optional[int] = ..., pending_reason: _Optional[str] = ..., start_earliest_ms: _Optional[int] = ..., start_latest_ms: _Optional[int] = ..., start_basis: _Optional[str] = ..., unschedulable: _Optional[str] = ..., reserved_workers: _Optional[_Iterable[str]] = ..., reserved_backend_id: _Optional[str] = ..., preemptions: _Optional[_Iterable[_Union[PlannedPreemption, _Mapping]]] = ..., band: _Optional[str] = ..., requested_band: _Optional[str] = ..., spend: _Optional[int] = ..., budget: _Optional[float] = ..., over_budget: _Optional[bool] = ..., timeout_s: _Optional[float] = ..., peer_id: _Optional[str] = ..., peer_backend_id: _Optional[str] = ..., peer_reclaims: _Optional[float] = ..., candidate_peers: _Optional[_Iterable[str]] = ..., pinned_peer: _Optional[str] = ..., route: _Optional[str] = ...) -> None: ...

class HandOffJobsRequest(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[LaunchJobRequest]
    def __init__(self, jobs: _Optional[_Iterable[_Union[LaunchJobRequest, _Mapping]]] = ...) -> None: ...

class HandOffOutcome(_message.Message):
    __slots__ = ("job_id", "accepted", "error_code", "error_message")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    accepted: LaunchJobResponse
    error_code: str
    error_message: str
    def __init__(self, job_id: _Optional[str] = ..., accepted: _Optional[_Union[LaunchJobResponse, _Mapping]] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ...) -> None: ...

class HandOffJobsResponse(_message.Message):
    __slots__ = ("outcomes",)
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    outcomes: _containers.RepeatedCompositeFieldContainer[HandOffOutcome]
    def __init__(self, outcomes: _Optional[_Iterable[_Union[HandOffOutcome, _Mapping]]] = ...) -> None: ...

class AttemptStatus(_message.Message):
    __slots__ = ("attempt_id", "attempt", "state", "backend_id", "worker_id", "exit_code", "has_exit_code", "started_ms", "finished_ms", "error", "pid")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    BACKEND_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    HAS_EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    attempt: int
    state: str
    backend_id: str
    worker_id: str
    exit_code: int
    has_exit_code: bool
    started_ms: int
    finished_ms: int
    error: str
    pid: int
    def __init__(self, attempt_id: _Optional[str] = ..., attempt: _Optional[int] = ..., state: _Optional[str] = ..., backend_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., exit_code: _Optional[int] = ..., has_exit_code: _Optional[bool] = ..., started_ms: _Optional[int] = ..., finished_ms: _Optional[int] = ..., error: _Optional[str] = ..., pid: _Optional[int] = ...) -> None: ...

class TaskStatus(_message.Message):
    __slots__ = ("task_id", "job_id", "index", "state", "attempt", "backend_id", "worker_id", "exit_code", "has_exit_code", "started_ms", "finished_ms", "error", "failure_count", "preemption_count", "attempts", "cluster")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    BACKEND_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    HAS_EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FAILURE_COUNT_FIELD_NUMBER: _ClassVar[int]
    PREEMPTION_COUNT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    job_id: str
    index: int
    state: str
    attempt: int
    backend_id: str
    worker_id: str
    exit_code: int
    has_exit_code: bool
    started_ms: int
    finished_ms: int
    error: str
    failure_count: int
    preemption_count: int
    attempts: _containers.RepeatedCompositeFieldContainer[AttemptStatus]
    cluster: str
    def __init__(self, task_id: _Optional[str] = ..., job_id: _Optional[str] = ..., index: _Optional[int] = ..., state: _Optional[str] = ..., attempt: _Optional[int] = ..., backend_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., exit_code: _Optional[int] = ..., has_exit_code: _Optional[bool] = ..., started_ms: _Optional[int] = ..., finished_ms: _Optional[int] = ..., error: _Optional[str] = ..., failure_count: _Optional[int] = ..., preemption_count: _Optional[int] = ..., attempts: _Optional[_Iterable[_Union[AttemptStatus, _Mapping]]] = ..., cluster: _Optional[str] = ...) -> None: ...

class JobStatus(_message.Message):
    __slots__ = ("job_id", "state", "user", "priority", "cluster", "replicas", "task_counts", "submitted_ms", "started_ms", "finished_ms", "pending_reason", "error", "parent_job_id", "resources", "command", "constraints", "handoff_state", "peer_id", "stale", "exit_code", "has_exit_code", "owner", "last_sync_ms", "timeout_s", "start_earliest_ms", "start_latest_ms", "start_basis")
    class TaskCountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    TASK_COUNTS_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_MS_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_MS_FIELD_NUMBER: _ClassVar[int]
    PENDING_REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PARENT_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_STATE_FIELD_NUMBER: _ClassVar[int]
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    HAS_EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    LAST_SYNC_MS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    START_EARLIEST_MS_FIELD_NUMBER: _ClassVar[int]
    START_LATEST_MS_FIELD_NUMBER: _ClassVar[int]
    START_BASIS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    state: str
    user: str
    priority: str
    cluster: str
    replicas: int
    task_counts: _containers.ScalarMap[str, int]
    submitted_ms: int
    started_ms: int
    finished_ms: int
    pending_reason: str
    error: str
    parent_job_id: str
    resources: Resources
    command: _containers.RepeatedScalarFieldContainer[str]
    constraints: _containers.RepeatedCompositeFieldContainer[Constraint]
    handoff_state: str
    peer_id: str
    stale: bool
    exit_code: int
    has_exit_code: bool
    owner: str
    last_sync_ms: int
    timeout_s: float
    start_earliest_ms: int
    start_latest_ms: int
    start_basis: str
    def __init__(self, job_id: _Optional[str] = ..., state: _Optional[str] = ..., user: _Optional[str] = ..., priority: _Optional[str] = ..., cluster: _Optional[str] = ..., replicas: _Optional[int] = ..., task_counts: _Optional[_Mapping[str, int]] = ..., submitted_ms: _Optional[int] = ..., started_ms: _Optional[int] = ..., finished_ms: _Optional[int] = ..., pending_reason: _Optional[str] = ..., error: _Optional[str] = ..., parent_job_id: _Optional[str] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., command: _Optional[_Iterable[str]] = ..., constraints: _Optional[_Iterable[_Union[Constraint, _Mapping]]] = ..., handoff_state: _Optional[str] = ..., peer_id: _Optional[str] = ..., stale: _Optional[bool] = ..., exit_code: _Optional[int] = ..., has_exit_code: _Optional[bool] = ..., owner: _Optional[str] = ..., last_sync_ms: _Optional[int] = ..., timeout_s: _Optional[float] = ..., start_earliest_ms: _Optional[int] = ..., start_latest_ms: _Optional[int] = ..., start_basis: _Optional[str] = ...) -> None: ...

class GetJobStatusRequest(_message.Message):
    __slots__ = ("job_id", "include_tasks", "include_attempts", "wait_while_state", "wait_ms")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_TASKS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    WAIT_WHILE_STATE_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    include_tasks: bool
    include_attempts: bool
    wait_while_state: str
    wait_ms: int
    def __init__(self, job_id: _Optional[str] = ..., include_tasks: _Optional[bool] = ..., include_attempts: _Optional[bool] = ..., wait_while_state: _Optional[str] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class GetJobStatusResponse(_message.Message):
    __slots__ = ("job", "tasks", "next_task_page_token", "total_tasks")
    JOB_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_TASK_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TASKS_FIELD_NUMBER: _ClassVar[int]
    job: JobStatus
    tasks: _containers.RepeatedCompositeFieldContainer[TaskStatus]
    next_task_page_token: str
    total_tasks: int
    def __init__(self, job: _Optional[_Union[JobStatus, _Mapping]] = ..., tasks: _Optional[_Iterable[_Union[TaskStatus, _Mapping]]] = ..., next_task_page_token: _Optional[str] = ..., total_tasks: _Optional[int] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("state", "prefix", "limit", "user", "cluster", "parent_job_id", "page_token")
    STATE_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    PARENT_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    state: str
    prefix: str
    limit: int
    user: str
    cluster: str
    parent_job_id: str
    page_token: str
    def __init__(self, state: _Optional[str] = ..., prefix: _Optional[str] = ..., limit: _Optional[int] = ..., user: _Optional[str] = ..., cluster: _Optional[str] = ..., parent_job_id: _Optional[str] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token", "total")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobStatus]
    next_page_token: str
    total: int
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobStatus, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., total: _Optional[int] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = ("job_id", "include_attempts", "limit", "page_token")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    include_attempts: bool
    limit: int
    page_token: str
    def __init__(self, job_id: _Optional[str] = ..., include_attempts: _Optional[bool] = ..., limit: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ("tasks", "next_page_token", "total")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskStatus]
    next_page_token: str
    total: int
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskStatus, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., total: _Optional[int] = ...) -> None: ...

class TerminateJobRequest(_message.Message):
    __slots__ = ("job_id", "reason", "nonce")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    reason: str
    nonce: str
    def __init__(self, job_id: _Optional[str] = ..., reason: _Optional[str] = ..., nonce: _Optional[str] = ...) -> None: ...

class TerminateJobResponse(_message.Message):
    __slots__ = ("terminated", "state")
    TERMINATED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    terminated: _containers.RepeatedScalarFieldContainer[str]
    state: str
    def __init__(self, terminated: _Optional[_Iterable[str]] = ..., state: _Optional[str] = ...) -> None: ...

class LogLine(_message.Message):
    __slots__ = ("seq", "task_index", "attempt", "stream", "ts_ms", "text")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TS_MS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    seq: int
    task_index: int
    attempt: int
    stream: str
    ts_ms: int
    text: str
    def __init__(self, seq: _Optional[int] = ..., task_index: _Optional[int] = ..., attempt: _Optional[int] = ..., stream: _Optional[str] = ..., ts_ms: _Optional[int] = ..., text: _Optional[str] = ...) -> None: ...

class FetchLogsRequest(_message.Message):
    __slots__ = ("job_id", "task_index", "after_seq", "tail", "limit", "wait_ms")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    TAIL_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_index: int
    after_seq: int
    tail: int
    limit: int
    wait_ms: int
    def __init__(self, job_id: _Optional[str] = ..., task_index: _Optional[int] = ..., after_seq: _Optional[int] = ..., tail: _Optional[int] = ..., limit: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class FetchLogsResponse(_message.Message):
    __slots__ = ("lines", "next_seq", "job_finished", "job_state")
    LINES_FIELD_NUMBER: _ClassVar[int]
    NEXT_SEQ_FIELD_NUMBER: _ClassVar[int]
    JOB_FINISHED_FIELD_NUMBER: _ClassVar[int]
    JOB_STATE_FIELD_NUMBER: _ClassVar[int]
    lines: _containers.RepeatedCompositeFieldContainer[LogLine]
    next_seq: int
    job_finished: bool
    job_state: str
    def __init__(self, lines: _Optional[_Iterable[_Union[LogLine, _Mapping]]] = ..., next_seq: _Optional[int] = ..., job_finished: _Optional[bool] = ..., job_state: _Optional[str] = ...) -> None: ...

class BandAmounts(_message.Message):
    __slots__ = ("band", "amounts")
    class AmountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    BAND_FIELD_NUMBER: _ClassVar[int]
    AMOUNTS_FIELD_NUMBER: _ClassVar[int]
    band: str
    amounts: _containers.ScalarMap[str, float]
    def __init__(self, band: _Optional[str] = ..., amounts: _Optional[_Mapping[str, float]] = ...) -> None: ...

class Availability(_message.Message):
    __slots__ = ("version", "observation_epoch_ms", "amounts", "total_amounts", "held_by_band")
    class AmountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class TotalAmountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    VERSION_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_EPOCH_MS_FIELD_NUMBER: _ClassVar[int]
    AMOUNTS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_AMOUNTS_FIELD_NUMBER: _ClassVar[int]
    HELD_BY_BAND_FIELD_NUMBER: _ClassVar[int]
    version: int
    observation_epoch_ms: int
    amounts: _containers.ScalarMap[str, float]
    total_amounts: _containers.ScalarMap[str, float]
    held_by_band: _containers.RepeatedCompositeFieldContainer[BandAmounts]
    def __init__(self, version: _Optional[int] = ..., observation_epoch_ms: _Optional[int] = ..., amounts: _Optional[_Mapping[str, float]] = ..., total_amounts: _Optional[_Mapping[str, float]] = ..., held_by_band: _Optional[_Iterable[_Union[BandAmounts, _Mapping]]] = ...) -> None: ...

class WorkerInfo(_message.Message):
    __slots__ = ("worker_id", "backend_id", "alive", "capacity", "used", "attributes", "running_tasks", "last_contact_ms", "runtime", "running", "isolation_warning")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    BACKEND_ID_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    RUNNING_TASKS_FIELD_NUMBER: _ClassVar[int]
    LAST_CONTACT_MS_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_WARNING_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    backend_id: str
    alive: bool
    capacity: Resources
    used: Resources
    attributes: _containers.ScalarMap[str, str]
    running_tasks: int
    last_contact_ms: int
    runtime: str
    running: _containers.RepeatedScalarFieldContainer[str]
    isolation_warning: str
    def __init__(self, worker_id: _Optional[str] = ..., backend_id: _Optional[str] = ..., alive: _Optional[bool] = ..., capacity: _Optional[_Union[Resources, _Mapping]] = ..., used: _Optional[_Union[Resources, _Mapping]] = ..., attributes: _Optional[_Mapping[str, str]] = ..., running_tasks: _Optional[int] = ..., last_contact_ms: _Optional[int] = ..., runtime: _Optional[str] = ..., running: _Optional[_Iterable[str]] = ..., isolation_warning: _Optional[str] = ...) -> None: ...

class BackendInfo(_message.Message):
    __slots__ = ("id", "kind", "attributes", "availability", "workers", "worker_capacity", "live_workers", "capacity", "problem")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    AVAILABILITY_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    WORKER_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    LIVE_WORKERS_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    PROBLEM_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: str
    attributes: _containers.ScalarMap[str, str]
    availability: Availability
    workers: int
    worker_capacity: Resources
    live_workers: int
    capacity: Resources
    problem: str
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[str] = ..., attributes: _Optional[_Mapping[str, str]] = ..., availability: _Optional[_Union[Availability, _Mapping]] = ..., workers: _Optional[int] = ..., worker_capacity: _Optional[_Union[Resources, _Mapping]] = ..., live_workers: _Optional[int] = ..., capacity: _Optional[_Union[Resources, _Mapping]] = ..., problem: _Optional[str] = ...) -> None: ...

class ListBackendsRequest(_message.Message):
    __slots__ = ("limit", "page_token")
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    limit: int
    page_token: str
    def __init__(self, limit: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListBackendsResponse(_message.Message):
    __slots__ = ("cluster", "backends", "next_page_token", "total")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    backends: _containers.RepeatedCompositeFieldContainer[BackendInfo]
    next_page_token: str
    total: int
    def __init__(self, cluster: _Optional[str] = ..., backends: _Optional[_Iterable[_Union[BackendInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., total: _Optional[int] = ...) -> None: ...

class ListWorkersRequest(_message.Message):
    __slots__ = ("backend_id", "limit", "page_token")
    BACKEND_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    backend_id: str
    limit: int
    page_token: str
    def __init__(self, backend_id: _Optional[str] = ..., limit: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListWorkersResponse(_message.Message):
    __slots__ = ("workers", "next_page_token", "total")
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerInfo]
    next_page_token: str
    total: int
    def __init__(self, workers: _Optional[_Iterable[_Union[WorkerInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., total: _Optional[int] = ...) -> None: ...

class PeerInfo(_message.Message):
    __slots__ = ("peer_id", "address", "reachable", "last_contact_ms", "active_federated_jobs", "backends", "last_error", "cluster")
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REACHABLE_FIELD_NUMBER: _ClassVar[int]
    LAST_CONTACT_MS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FEDERATED_JOBS_FIELD_NUMBER: _ClassVar[int]
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    peer_id: str
    address: str
    reachable: bool
    last_contact_ms: int
    active_federated_jobs: int
    backends: _containers.RepeatedCompositeFieldContainer[BackendInfo]
    last_error: str
    cluster: str
    def __init__(self, peer_id: _Optional[str] = ..., address: _Optional[str] = ..., reachable: _Optional[bool] = ..., last_contact_ms: _Optional[int] = ..., active_federated_jobs: _Optional[int] = ..., backends: _Optional[_Iterable[_Union[BackendInfo, _Mapping]]] = ..., last_error: _Optional[str] = ..., cluster: _Optional[str] = ...) -> None: ...

class ListPeersRequest(_message.Message):
    __slots__ = ("limit", "page_token")
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    limit: int
    page_token: str
    def __init__(self, limit: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListPeersResponse(_message.Message):
    __slots__ = ("peers", "next_page_token", "total", "inbound")
    PEERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    INBOUND_FIELD_NUMBER: _ClassVar[int]
    peers: _containers.RepeatedCompositeFieldContainer[PeerInfo]
    next_page_token: str
    total: int
    inbound: _containers.RepeatedCompositeFieldContainer[InboundPeer]
    def __init__(self, peers: _Optional[_Iterable[_Union[PeerInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., total: _Optional[int] = ..., inbound: _Optional[_Iterable[_Union[InboundPeer, _Mapping]]] = ...) -> None: ...

class InboundPeer(_message.Message):
    __slots__ = ("peer_id", "last_contact_ms", "last_call", "active_federated_jobs", "trusted")
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_CONTACT_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_CALL_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FEDERATED_JOBS_FIELD_NUMBER: _ClassVar[int]
    TRUSTED_FIELD_NUMBER: _ClassVar[int]
    peer_id: str
    last_contact_ms: int
    last_call: str
    active_federated_jobs: int
    trusted: bool
    def __init__(self, peer_id: _Optional[str] = ..., last_contact_ms: _Optional[int] = ..., last_call: _Optional[str] = ..., active_federated_jobs: _Optional[int] = ..., trusted: _Optional[bool] = ...) -> None: ...

class ExecuteRawQueryRequest(_message.Message):
    __slots__ = ("sql", "limit")
    SQL_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    sql: str
    limit: int
    def __init__(self, sql: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ExecuteRawQueryResponse(_message.Message):
    __slots__ = ("columns", "rows", "truncated")
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    columns: _containers.RepeatedScalarFieldContainer[str]
    rows: _containers.RepeatedCompositeFieldContainer[_struct_pb2.ListValue]
    truncated: bool
    def __init__(self, columns: _Optional[_Iterable[str]] = ..., rows: _Optional[_Iterable[_Union[_struct_pb2.ListValue, _Mapping]]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class ExplainJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ExplainGroup(_message.Message):
    __slots__ = ("backend_id", "group", "workers", "verdict", "reasons")
    BACKEND_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    backend_id: str
    group: str
    workers: int
    verdict: str
    reasons: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, backend_id: _Optional[str] = ..., group: _Optional[str] = ..., workers: _Optional[int] = ..., verdict: _Optional[str] = ..., reasons: _Optional[_Iterable[str]] = ...) -> None: ...

class ExplainPeerBackend(_message.Message):
    __slots__ = ("peer_id", "backend_id", "state", "stale", "availability", "held_below")
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    BACKEND_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    AVAILABILITY_FIELD_NUMBER: _ClassVar[int]
    HELD_BELOW_FIELD_NUMBER: _ClassVar[int]
    peer_id: str
    backend_id: str
    state: str
    stale: bool
    availability: Availability
    held_below: _containers.RepeatedCompositeFieldContainer[BandAmounts]
    def __init__(self, peer_id: _Optional[str] = ..., backend_id: _Optional[str] = ..., state: _Optional[str] = ..., stale: _Optional[bool] = ..., availability: _Optional[_Union[Availability, _Mapping]] = ..., held_below: _Optional[_Iterable[_Union[BandAmounts, _Mapping]]] = ...) -> None: ...

class ExplainJobResponse(_message.Message):
    __slots__ = ("job_id", "summary", "groups", "lines", "peer_backends", "band")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    PEER_BACKENDS_FIELD_NUMBER: _ClassVar[int]
    BAND_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    summary: str
    groups: _containers.RepeatedCompositeFieldContainer[ExplainGroup]
    lines: _containers.RepeatedScalarFieldContainer[str]
    peer_backends: _containers.RepeatedCompositeFieldContainer[ExplainPeerBackend]
    band: str
    def __init__(self, job_id: _Optional[str] = ..., summary: _Optional[str] = ..., groups: _Optional[_Iterable[_Union[ExplainGroup, _Mapping]]] = ..., lines: _Optional[_Iterable[str]] = ..., peer_backends: _Optional[_Iterable[_Union[ExplainPeerBackend, _Mapping]]] = ..., band: _Optional[str] = ...) -> None: ...

class GetClusterInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetClusterInfoResponse(_message.Message):
    __slots__ = ("name", "version", "revision_date", "uptime_s", "job_counts", "backends", "peers", "pid", "state_dir", "caller", "caller_role", "healthy", "problems", "last_tick_age_s", "spend", "last_tick_ms", "task_isolation_warning")
    class JobCountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    REVISION_DATE_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    JOB_COUNTS_FIELD_NUMBER: _ClassVar[int]
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    STATE_DIR_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    CALLER_ROLE_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    LAST_TICK_AGE_S_FIELD_NUMBER: _ClassVar[int]
    SPEND_FIELD_NUMBER: _ClassVar[int]
    LAST_TICK_MS_FIELD_NUMBER: _ClassVar[int]
    TASK_ISOLATION_WARNING_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    revision_date: str
    uptime_s: float
    job_counts: _containers.ScalarMap[str, int]
    backends: int
    peers: int
    pid: int
    state_dir: str
    caller: str
    caller_role: str
    healthy: bool
    problems: _containers.RepeatedScalarFieldContainer[str]
    last_tick_age_s: float
    spend: _containers.RepeatedCompositeFieldContainer[UserSpend]
    last_tick_ms: float
    task_isolation_warning: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., revision_date: _Optional[str] = ..., uptime_s: _Optional[float] = ..., job_counts: _Optional[_Mapping[str, int]] = ..., backends: _Optional[int] = ..., peers: _Optional[int] = ..., pid: _Optional[int] = ..., state_dir: _Optional[str] = ..., caller: _Optional[str] = ..., caller_role: _Optional[str] = ..., healthy: _Optional[bool] = ..., problems: _Optional[_Iterable[str]] = ..., last_tick_age_s: _Optional[float] = ..., spend: _Optional[_Iterable[_Union[UserSpend, _Mapping]]] = ..., last_tick_ms: _Optional[float] = ..., task_isolation_warning: _Optional[str] = ...) -> None: ...

class UserSpend(_message.Message):
    __slots__ = ("user", "spend", "on_peers", "budget", "over_budget")
    USER_FIELD_NUMBER: _ClassVar[int]
    SPEND_FIELD_NUMBER: _ClassVar[int]
    ON_PEERS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    OVER_BUDGET_FIELD_NUMBER: _ClassVar[int]
    user: str
    spend: int
    on_peers: int
    budget: float
    over_budget: bool
    def __init__(self, user: _Optional[str] = ..., spend: _Optional[int] = ..., on_peers: _Optional[int] = ..., budget: _Optional[float] = ..., over_budget: _Optional[bool] = ...) -> None: ...

class SyncedAttempt(_message.Message):
    __slots__ = ("task_index", "attempt", "state", "worker_id", "exit_code", "has_exit_code", "started_ms", "finished_ms", "error")
    TASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    HAS_EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    task_index: int
    attempt: int
    state: str
    worker_id: str
    exit_code: int
    has_exit_code: bool
    started_ms: int
    finished_ms: int
    error: str
    def __init__(self, task_index: _Optional[int] = ..., attempt: _Optional[int] = ..., state: _Optional[str] = ..., worker_id: _Optional[str] = ..., exit_code: _Optional[int] = ..., has_exit_code: _Optional[bool] = ..., started_ms: _Optional[int] = ..., finished_ms: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class SyncedJob(_message.Message):
    __slots__ = ("job", "tasks", "attempts")
    JOB_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    job: JobStatus
    tasks: _containers.RepeatedCompositeFieldContainer[TaskStatus]
    attempts: _containers.RepeatedCompositeFieldContainer[SyncedAttempt]
    def __init__(self, job: _Optional[_Union[JobStatus, _Mapping]] = ..., tasks: _Optional[_Iterable[_Union[TaskStatus, _Mapping]]] = ..., attempts: _Optional[_Iterable[_Union[SyncedAttempt, _Mapping]]] = ...) -> None: ...

class FederationSyncRequest(_message.Message):
    __slots__ = ("requester", "cursor", "job_ids")
    REQUESTER_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    requester: str
    cursor: int
    job_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, requester: _Optional[str] = ..., cursor: _Optional[int] = ..., job_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class FederationSyncResponse(_message.Message):
    __slots__ = ("jobs", "tombstones", "cursor", "cursor_stale", "log_heads", "reports_log_heads", "estimates")
    class LogHeadsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class EstimatesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: StartEstimate
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[StartEstimate, _Mapping]] = ...) -> None: ...
    JOBS_FIELD_NUMBER: _ClassVar[int]
    TOMBSTONES_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    CURSOR_STALE_FIELD_NUMBER: _ClassVar[int]
    LOG_HEADS_FIELD_NUMBER: _ClassVar[int]
    REPORTS_LOG_HEADS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATES_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[SyncedJob]
    tombstones: _containers.RepeatedScalarFieldContainer[str]
    cursor: int
    cursor_stale: bool
    log_heads: _containers.ScalarMap[str, int]
    reports_log_heads: bool
    estimates: _containers.MessageMap[str, StartEstimate]
    def __init__(self, jobs: _Optional[_Iterable[_Union[SyncedJob, _Mapping]]] = ..., tombstones: _Optional[_Iterable[str]] = ..., cursor: _Optional[int] = ..., cursor_stale: _Optional[bool] = ..., log_heads: _Optional[_Mapping[str, int]] = ..., reports_log_heads: _Optional[bool] = ..., estimates: _Optional[_Mapping[str, StartEstimate]] = ...) -> None: ...

class StartEstimate(_message.Message):
    __slots__ = ("earliest_ms", "latest_ms", "basis")
    EARLIEST_MS_FIELD_NUMBER: _ClassVar[int]
    LATEST_MS_FIELD_NUMBER: _ClassVar[int]
    BASIS_FIELD_NUMBER: _ClassVar[int]
    earliest_ms: int
    latest_ms: int
    basis: str
    def __init__(self, earliest_ms: _Optional[int] = ..., latest_ms: _Optional[int] = ..., basis: _Optional[str] = ...) -> None: ...

class RegisterWorkerRequest(_message.Message):
    __slots__ = ("backend_id", "name", "capacity", "attributes", "runtime", "boot_id", "previous_boot_id", "attempts", "isolation_warning")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    BACKEND_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    BOOT_ID_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_BOOT_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_WARNING_FIELD_NUMBER: _ClassVar[int]
    backend_id: str
    name: str
    capacity: Resources
    attributes: _containers.ScalarMap[str, str]
    runtime: str
    boot_id: str
    previous_boot_id: str
    attempts: _containers.RepeatedScalarFieldContainer[str]
    isolation_warning: str
    def __init__(self, backend_id: _Optional[str] = ..., name: _Optional[str] = ..., capacity: _Optional[_Union[Resources, _Mapping]] = ..., attributes: _Optional[_Mapping[str, str]] = ..., runtime: _Optional[str] = ..., boot_id: _Optional[str] = ..., previous_boot_id: _Optional[str] = ..., attempts: _Optional[_Iterable[str]] = ..., isolation_warning: _Optional[str] = ...) -> None: ...

class LogOffset(_message.Message):
    __slots__ = ("attempt_id", "stream", "offset")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    stream: str
    offset: int
    def __init__(self, attempt_id: _Optional[str] = ..., stream: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...

class RegisterWorkerResponse(_message.Message):
    __slots__ = ("session", "grace_period_s", "poll_hold_s", "resume", "kill", "worker_id", "lease_s")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    GRACE_PERIOD_S_FIELD_NUMBER: _ClassVar[int]
    POLL_HOLD_S_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    KILL_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_S_FIELD_NUMBER: _ClassVar[int]
    session: str
    grace_period_s: float
    poll_hold_s: float
    resume: _containers.RepeatedCompositeFieldContainer[LogOffset]
    kill: _containers.RepeatedScalarFieldContainer[str]
    worker_id: str
    lease_s: float
    def __init__(self, session: _Optional[str] = ..., grace_period_s: _Optional[float] = ..., poll_hold_s: _Optional[float] = ..., resume: _Optional[_Iterable[_Union[LogOffset, _Mapping]]] = ..., kill: _Optional[_Iterable[str]] = ..., worker_id: _Optional[str] = ..., lease_s: _Optional[float] = ...) -> None: ...

class AttemptLaunch(_message.Message):
    __slots__ = ("attempt_id", "job_id", "task_index", "attempt", "command", "env", "resources", "workdir", "image", "bundle_id", "files_id", "uid", "gid", "max_processes")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_ID_FIELD_NUMBER: _ClassVar[int]
    FILES_ID_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    GID_FIELD_NUMBER: _ClassVar[int]
    MAX_PROCESSES_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    job_id: str
    task_index: int
    attempt: int
    command: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    resources: Resources
    workdir: str
    image: str
    bundle_id: str
    files_id: str
    uid: int
    gid: int
    max_processes: int
    def __init__(self, attempt_id: _Optional[str] = ..., job_id: _Optional[str] = ..., task_index: _Optional[int] = ..., attempt: _Optional[int] = ..., command: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., workdir: _Optional[str] = ..., image: _Optional[str] = ..., bundle_id: _Optional[str] = ..., files_id: _Optional[str] = ..., uid: _Optional[int] = ..., gid: _Optional[int] = ..., max_processes: _Optional[int] = ...) -> None: ...

class FetchBundleRequest(_message.Message):
    __slots__ = ("backend_id", "session", "attempt_id", "content_id")
    BACKEND_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_ID_FIELD_NUMBER: _ClassVar[int]
    backend_id: str
    session: str
    attempt_id: str
    content_id: str
    def __init__(self, backend_id: _Optional[str] = ..., session: _Optional[str] = ..., attempt_id: _Optional[str] = ..., content_id: _Optional[str] = ...) -> None: ...

class FetchBundleResponse(_message.Message):
    __slots__ = ("data", "files")
    class FilesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    DATA_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    files: _containers.ScalarMap[str, bytes]
    def __init__(self, data: _Optional[bytes] = ..., files: _Optional[_Mapping[str, bytes]] = ...) -> None: ...

class WorkerCommand(_message.Message):
    __slots__ = ("seq", "start", "stop")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    seq: int
    start: AttemptLaunch
    stop: str
    def __init__(self, seq: _Optional[int] = ..., start: _Optional[_Union[AttemptLaunch, _Mapping]] = ..., stop: _Optional[str] = ...) -> None: ...

class WorkerLogBatch(_message.Message):
    __slots__ = ("attempt_id", "stream", "offset", "data")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    stream: str
    offset: int
    data: bytes
    def __init__(self, attempt_id: _Optional[str] = ..., stream: _Optional[str] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class WorkerAttemptExit(_message.Message):
    __slots__ = ("attempt_id", "exit_code", "has_exit_code", "error", "stdout_size", "stderr_size")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    HAS_EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STDOUT_SIZE_FIELD_NUMBER: _ClassVar[int]
    STDERR_SIZE_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    exit_code: int
    has_exit_code: bool
    error: str
    stdout_size: int
    stderr_size: int
    def __init__(self, attempt_id: _Optional[str] = ..., exit_code: _Optional[int] = ..., has_exit_code: _Optional[bool] = ..., error: _Optional[str] = ..., stdout_size: _Optional[int] = ..., stderr_size: _Optional[int] = ...) -> None: ...

class WorkerPollRequest(_message.Message):
    __slots__ = ("backend_id", "session", "acked_seq", "wait_ms", "logs", "exits", "leaving")
    BACKEND_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    ACKED_SEQ_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    LOGS_FIELD_NUMBER: _ClassVar[int]
    EXITS_FIELD_NUMBER: _ClassVar[int]
    LEAVING_FIELD_NUMBER: _ClassVar[int]
    backend_id: str
    session: str
    acked_seq: int
    wait_ms: int
    logs: _containers.RepeatedCompositeFieldContainer[WorkerLogBatch]
    exits: _containers.RepeatedCompositeFieldContainer[WorkerAttemptExit]
    leaving: bool
    def __init__(self, backend_id: _Optional[str] = ..., session: _Optional[str] = ..., acked_seq: _Optional[int] = ..., wait_ms: _Optional[int] = ..., logs: _Optional[_Iterable[_Union[WorkerLogBatch, _Mapping]]] = ..., exits: _Optional[_Iterable[_Union[WorkerAttemptExit, _Mapping]]] = ..., leaving: _Optional[bool] = ...) -> None: ...

class WorkerPollResponse(_message.Message):
    __slots__ = ("reregister", "commands", "log_offsets", "accepted_exits")
    REREGISTER_FIELD_NUMBER: _ClassVar[int]
    COMMANDS_FIELD_NUMBER: _ClassVar[int]
    LOG_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_EXITS_FIELD_NUMBER: _ClassVar[int]
    reregister: bool
    commands: _containers.RepeatedCompositeFieldContainer[WorkerCommand]
    log_offsets: _containers.RepeatedCompositeFieldContainer[LogOffset]
    accepted_exits: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, reregister: _Optional[bool] = ..., commands: _Optional[_Iterable[_Union[WorkerCommand, _Mapping]]] = ..., log_offsets: _Optional[_Iterable[_Union[LogOffset, _Mapping]]] = ..., accepted_exits: _Optional[_Iterable[str]] = ...) -> None: ...

class RevokeTokenRequest(_message.Message):
    __slots__ = ("token_id", "subject", "expires_ms")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    token_id: str
    subject: str
    expires_ms: int
    def __init__(self, token_id: _Optional[str] = ..., subject: _Optional[str] = ..., expires_ms: _Optional[int] = ...) -> None: ...

class RevokeTokenResponse(_message.Message):
    __slots__ = ("token_id", "newly_revoked")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    NEWLY_REVOKED_FIELD_NUMBER: _ClassVar[int]
    token_id: str
    newly_revoked: bool
    def __init__(self, token_id: _Optional[str] = ..., newly_revoked: _Optional[bool] = ...) -> None: ...

class Endpoint(_message.Message):
    __slots__ = ("job_id", "name", "address", "attempt_id", "created_ms")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    name: str
    address: str
    attempt_id: str
    created_ms: int
    def __init__(self, job_id: _Optional[str] = ..., name: _Optional[str] = ..., address: _Optional[str] = ..., attempt_id: _Optional[str] = ..., created_ms: _Optional[int] = ...) -> None: ...

class RegisterEndpointRequest(_message.Message):
    __slots__ = ("job_id", "attempt_id", "name", "host", "port")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt_id: str
    name: str
    host: str
    port: int
    def __init__(self, job_id: _Optional[str] = ..., attempt_id: _Optional[str] = ..., name: _Optional[str] = ..., host: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class RegisterEndpointResponse(_message.Message):
    __slots__ = ("endpoint",)
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    endpoint: Endpoint
    def __init__(self, endpoint: _Optional[_Union[Endpoint, _Mapping]] = ...) -> None: ...

class ListEndpointsRequest(_message.Message):
    __slots__ = ("job_id", "limit", "page_token")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    limit: int
    page_token: str
    def __init__(self, job_id: _Optional[str] = ..., limit: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListEndpointsResponse(_message.Message):
    __slots__ = ("endpoints", "next_page_token", "total")
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    endpoints: _containers.RepeatedCompositeFieldContainer[Endpoint]
    next_page_token: str
    total: int
    def __init__(self, endpoints: _Optional[_Iterable[_Union[Endpoint, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., total: _Optional[int] = ...) -> None: ...

class MintEndpointUrlRequest(_message.Message):
    __slots__ = ("job_id", "name", "ttl_s")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    name: str
    ttl_s: float
    def __init__(self, job_id: _Optional[str] = ..., name: _Optional[str] = ..., ttl_s: _Optional[float] = ...) -> None: ...

class MintEndpointUrlResponse(_message.Message):
    __slots__ = ("url", "expires_ms")
    URL_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    url: str
    expires_ms: int
    def __init__(self, url: _Optional[str] = ..., expires_ms: _Optional[int] = ...) -> None: ...
