"""Parses and builds job, task and attempt names: the one place an id is taken apart or put together.

A root job is `/<user>/<name>`, a child nests under its parent (`/<user>/<parent>/<child>`), a task
is `<job>/<index>` and an attempt `<task>:<n>`. Every cluster parses them identically: a peer files a
handed-off job under its requester's namespace (`iris.federation.ids`) and maps ids back by string
rules alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from iris.core.errors import InvalidArgument

_COMPONENT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # whole value: fullmatch, never a trailing newline
MAX_DEPTH = 16
# Who a token names: a user (`alice`, `alice@example.org`), a host (`host-1`), a service.
_PRINCIPAL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,255}")
MAX_PRINCIPAL = 256
_WORKER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")  # a worker's name is also a folder name


def validate_component(kind: str, value: str) -> str:
    """Checks one path component (a user or a job name)."""
    if not _COMPONENT_RE.fullmatch(value or ""):
        raise InvalidArgument(
            f"{kind} {value!r} is not valid: use letters, digits, '.', '_' or '-', starting with a letter or digit (at most 128 characters)"
        )
    if value.isdigit():
        raise InvalidArgument(f"{kind} {value!r} is not valid: an all-digit name would read as a task index")
    return value


def validate_worker_name(value: str) -> str:
    """Checks a worker daemon's name, which is also the folder its files live in by default."""
    if not _WORKER_RE.fullmatch(value or ""):
        raise InvalidArgument(
            f"worker name {value!r} is not usable: use 1-63 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit"
        )
    return value


def validate_principal(value: str) -> str:
    """Checks a name a token is minted for: letters, digits, '.', '_', '@', '+' or '-'."""
    if not _PRINCIPAL_RE.fullmatch(value or ""):
        raise InvalidArgument(
            f"user {value!r} is not a name a token can be minted for: use letters, digits, '.', '_', '@', '+' "
            f"or '-', starting with a letter or digit (at most {MAX_PRINCIPAL} characters), e.g. alice or alice@example.org"
        )
    return value


def check_accountable_name(kind: str, value: str) -> str:
    """Checks a principal that arrives from elsewhere (a peer's handoff owner): at most
    `MAX_PRINCIPAL` characters, none of them blank or unprintable. Looser than `validate_principal`,
    since a peer's own users may have been named by an older rule."""
    if len(value) > MAX_PRINCIPAL or not value.isprintable() or any(c.isspace() for c in value):
        raise InvalidArgument(
            f"{kind} {value[:80]!r}{'…' if len(value) > 80 else ''} is not a user name: at most {MAX_PRINCIPAL} "
            "printable characters, no spaces"
        )
    return value


@dataclass(frozen=True, slots=True)
class JobName:
    """A job id split into its user and the chain of names from the root job down."""

    user: str
    parts: tuple[str, ...]

    @staticmethod
    def parse(job_id: str) -> JobName:
        if not job_id or not job_id.startswith("/"):
            raise InvalidArgument(f"job id {job_id!r} must start with '/': /<user>/<name>[/<child>…]")
        pieces = job_id.strip("/").split("/")
        if len(pieces) < 2:
            raise InvalidArgument(f"job id {job_id!r} must name a user and a job: /<user>/<name>")
        if len(pieces) - 1 > MAX_DEPTH:
            raise InvalidArgument(f"job id {job_id!r} nests deeper than {MAX_DEPTH} levels")
        validate_component("user", pieces[0])
        for piece in pieces[1:]:
            validate_component("job name", piece)
        return JobName(pieces[0], tuple(pieces[1:]))

    @staticmethod
    def root(user: str, name: str) -> JobName:
        return JobName(validate_component("user", user), (validate_component("job name", name),))

    def child(self, name: str) -> JobName:
        if len(self.parts) >= MAX_DEPTH:
            raise InvalidArgument(f"job {self} is already {MAX_DEPTH} levels deep; it cannot have children")
        return JobName(self.user, self.parts + (validate_component("job name", name),))

    @property
    def is_root(self) -> bool:
        return len(self.parts) == 1

    @property
    def depth(self) -> int:
        return len(self.parts) - 1

    @property
    def parent(self) -> JobName | None:
        return None if self.is_root else JobName(self.user, self.parts[:-1])

    @property
    def root_job(self) -> JobName:
        return JobName(self.user, self.parts[:1])

    @property
    def job(self) -> JobName:
        return self

    def with_job(self, job: JobName) -> JobName:
        return job

    def __str__(self) -> str:
        return "/" + "/".join((self.user, *self.parts))


def in_job_tree(job_id: str, root: str) -> bool:
    """Whether `job_id` is `root` itself or one of its descendants (a child's id extends its parent's)."""
    return job_id == root or job_id.startswith(root.rstrip("/") + "/")


@dataclass(frozen=True, slots=True)
class TaskName:
    """A task id, `<job>/<index>`: one of the job's `replicas` tasks."""

    job: JobName
    index: int

    @staticmethod
    def parse(value: str) -> TaskName:
        job_id, _, index = value.rpartition("/")
        if not index.isdigit() or not job_id:
            raise InvalidArgument(f"task id {value!r} must be <job>/<index>, e.g. /alice/train/0")
        return TaskName(JobName.parse(job_id), int(index))

    @property
    def job_id(self) -> str:
        return str(self.job)

    def attempt(self, n: int) -> AttemptName:
        return AttemptName(self, n)

    def with_job(self, job: JobName) -> TaskName:
        """The same task index in another job."""
        return TaskName(job, self.index)

    def __str__(self) -> str:
        return f"{self.job}/{self.index}"


@dataclass(frozen=True, slots=True)
class AttemptName:
    """An attempt id, `<task>:<n>`: the n-th run of a task (counting from 1)."""

    task: TaskName
    attempt: int

    @staticmethod
    def parse(value: str) -> AttemptName:
        task, _, attempt = value.rpartition(":")
        if not attempt.isdigit() or not task:
            raise InvalidArgument(f"attempt id {value!r} must be <job>/<index>:<attempt>, e.g. /alice/train/0:1")
        return AttemptName(TaskName.parse(task), int(attempt))

    @property
    def job_id(self) -> str:
        return str(self.task.job)

    @property
    def index(self) -> int:
        return self.task.index

    @property
    def job(self) -> JobName:
        return self.task.job

    def with_job(self, job: JobName) -> AttemptName:
        """The same task index and attempt number in another job."""
        return AttemptName(self.task.with_job(job), self.attempt)

    def __str__(self) -> str:
        return f"{self.task}:{self.attempt}"


def parse_id(value: str) -> JobName | TaskName | AttemptName:
    """A job, task or attempt id, whichever `value` is: only an attempt id has a ':', and only a
    task id ends in an all-digit component (a job name may not be all digits)."""
    if ":" in value:
        return AttemptName.parse(value)
    if value.rpartition("/")[2].isdigit():
        return TaskName.parse(value)
    return JobName.parse(value)
