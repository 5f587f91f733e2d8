"""Who a caller is: the roles Iris knows and the identity every request resolves to.

An identity is plain data (principal, role, issuer) so that authorization, job ownership and the
handoff record all read the same three facts, however the caller proved them: a token minted by
this cluster, a token signed by a federation peer, the uid the kernel names for a connection to the
controller's Unix socket, or (an explicit opt-in) a request from `auth.trusted_cidrs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from iris.core.errors import InvalidArgument

LOCAL_ADMIN = "local_admin"
"""The principal of the operator without a token: a connection to the controller's Unix socket from
the controller's own uid (or root), or a tokenless request from `auth.trusted_cidrs`."""

ANONYMOUS = "anonymous"
"""The principal of a tokenless TCP request from outside `auth.trusted_cidrs`: it may read what
anyone may (`/health`, GetClusterInfo) and nothing else."""

RELAYED_HEADER = "x-iris-relayed"
"""Set by `/proxy/t/` on every request it relays (to a task's endpoint or a peer's relay). The relay
sends no token and comes from a controller's own address, which a cluster on the same host trusts:
an endpoint registered at a controller's port would otherwise hand whoever holds its URL that
controller's API as local_admin. A request carrying it is never local_admin."""


class Role(StrEnum):
    """What a principal may do; the value is what a token's `role` claim carries."""

    ADMIN = "admin"
    USER = "user"
    DASHBOARD = "dashboard"
    WORKER = "worker"
    FEDERATION_PEER = "federation-peer"
    TASK = "task"  # one attempt of one job, acting for the job's owner within that job only
    ANONYMOUS = "anonymous"  # a caller that proved nothing; never a token's role

    @classmethod
    def parse(cls, value: str) -> Role:
        """Returns the role named `value` (a token's), or InvalidArgument listing the roles that exist."""
        try:
            role = cls(value)
        except (ValueError, TypeError):
            role = cls.ANONYMOUS
        if role is cls.ANONYMOUS:
            known = ", ".join(r.value for r in cls if r is not cls.ANONYMOUS)
            raise InvalidArgument(f"unknown role {value!r}; roles are {known}")
        return role


@dataclass(frozen=True)
class Identity:
    """A resolved caller. `issuer` is the cluster whose key vouched for it (this one for local_admin)."""

    principal: str
    role: Role
    issuer: str
    local_admin: bool = False
    token_id: str | None = None
    job_scope: str | None = None  # a task: the job it belongs to; it reaches only that job's subtree
    attempt_id: str | None = None  # a task: the attempt whose end ends the token
    # A task: the id of the token that submitted its job's tree (None: the operator did), whose
    # revocation ends the task's token too.
    credential: str | None = None
    # A worker token minted with `--worker NAME`: the one worker name it may register (None: a
    # token minted without one, bound to the first name it registers).
    worker: str | None = None

    @property
    def submitted_with(self) -> str:
        """The token id a job this identity submits runs under ("" for none): its own token's, or a
        task's the one its own job came from."""
        return (self.credential if self.role is Role.TASK else self.token_id) or ""
