"""What separates tasks from the controller and from each other: the uid each user's tasks run as,
the permissions of the state directory, and which Iris user a local account is.

When the controller runs as root, every Iris user's tasks run under a uid of that user's own, never
the controller's: a real account named in `auth.task_accounts` (`{alice: alice}`, the way Slurm runs
a job as its submitter), or else a uid from `auth.task_uids.range`. A range uid is chosen
deterministically (a hash of the user name, then the next free one on a collision) and recorded in
the `task_uids` table, so a user keeps the same uid across restarts and two users never share one.
The kernel then does the isolating: the state directory is 0711 (tasks may pass through it to their
own attempt folders but cannot list it), the database and the signing key are 0600, an attempt
folder is 0700 and owned by its task's uid, and `/proc/<pid>/environ` of another uid is unreadable.

Telling a task from the cluster's operator: a tokenless caller is named by the kernel only on the
controller's Unix socket (`SO_PEERCRED`, see `iris.controller.auth.callers`), where a uid of the
task range is refused; over TCP a tokenless caller is anonymous. Every task carries its own task
token, so the well-behaved ones never arrive tokenless in the first place. The state directory is
0711 in every mode, so other local accounts can reach the socket inside it (never list it).

When the controller runs as an ordinary user, tasks share its uid and none of this can hold: a task
can read the state directory, the key and other tasks' environments, and can reach the controller
as local_admin. That mode is for a person's own laptop; README says so.
"""

from __future__ import annotations

import hashlib
import os
import pwd
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

from sqlalchemy.engine import Connection

from iris.controller.db.database import sql
from iris.core import isolation
from iris.core.errors import FailedPrecondition, InvalidArgument

# Tasks under their own uids pass through to their attempt folders, and local accounts to the
# controller's socket; nobody but the controller lists it. Everything in it is 0600 or 0700.
STATE_DIR_MODE = 0o711
PRIVATE_FILE_MODE = 0o600
DEFAULT_TASK_UID_RANGE = (200_000, 299_999)


@dataclass(frozen=True, slots=True)
class TaskAccount:
    """The uid and gid one user's tasks run as; `home` is a home folder when it is a real account."""

    uid: int
    gid: int
    home: str = ""
    max_processes: int = 0  # processes and threads the uid may hold at once (0: no limit)


@dataclass(frozen=True, slots=True)
class TaskIdentity:
    """Who one attempt runs as: its token (scoped to its job and attempt) and its uid."""

    token: str | None = None
    account: TaskAccount | None = None


def parse_uid_range(text: str) -> tuple[int, int]:
    """`200000-299999` as (200000, 299999); InvalidArgument naming the key otherwise."""
    lo, sep, hi = str(text).partition("-")
    try:
        low, high = int(lo), int(hi)
    except ValueError:
        low = high = -1
    if not sep or low < 1000 or high < low:
        raise InvalidArgument(
            f"auth.task_uids.range: {text!r} is not a uid range LOW-HIGH above the system accounts (e.g. 200000-299999)"
        )
    return low, high


@dataclass(frozen=True, eq=False)
class TaskIdentities:
    """Which uid each Iris user's tasks run as; `enabled` only when the controller is root."""

    uid_range: tuple[int, int] = DEFAULT_TASK_UID_RANGE
    accounts: Mapping[str, TaskAccount] = field(default_factory=dict)
    enabled: bool = field(default_factory=lambda: os.geteuid() == 0)
    max_processes: int = 0  # per task uid; 0: a quarter of the host's process table

    def __post_init__(self) -> None:
        object.__setattr__(self, "accounts", MappingProxyType(dict(self.accounts)))
        object.__setattr__(self, "max_processes", self.max_processes or host_process_share())

    @classmethod
    def from_config(
        cls, range_text: str, accounts: Mapping[str, str], enabled: bool = True, max_processes: int = 0
    ) -> TaskIdentities:
        """Resolves `auth.task_accounts` to uids now, so a missing account fails at start.

        `enabled` false (`auth.task_uids.enabled`) keeps tasks on the controller's uid even as root.
        """
        resolved = {}
        for user, account in accounts.items():
            try:
                entry = pwd.getpwnam(account)
            except KeyError:
                raise InvalidArgument(
                    f"auth.task_accounts.{user}: there is no account {account!r} on this host; "
                    "create it or drop the mapping (the user's tasks then get a uid from auth.task_uids.range)"
                ) from None
            if entry.pw_uid == 0:
                raise InvalidArgument(
                    f"auth.task_accounts.{user}: tasks never run as root; map {user} to another account"
                )
            resolved[user] = TaskAccount(entry.pw_uid, entry.pw_gid, entry.pw_dir)
        return cls(
            parse_uid_range(range_text), resolved, enabled=enabled and os.geteuid() == 0, max_processes=max_processes
        )

    def user_of(self, uid: int) -> str | None:
        """The Iris user `auth.task_accounts` maps to account `uid`; None when none does."""
        for user, account in self.accounts.items():
            if account.uid == uid:
                return user
        return None

    def account_for(self, conn: Connection, user: str) -> TaskAccount | None:
        """The uid `user`'s tasks run as, assigned and recorded on first use; None when not root."""
        if not self.enabled:
            return None
        mapped = self.accounts.get(user)
        if mapped is not None:
            return replace(mapped, max_processes=self.max_processes)
        row = conn.execute(sql("SELECT uid FROM task_uids WHERE user = :u"), {"u": user}).first()
        if row is not None:
            return TaskAccount(row[0], row[0], max_processes=self.max_processes)
        low, high = self.uid_range
        size = high - low + 1
        taken = {r[0] for r in conn.execute(sql("SELECT uid FROM task_uids"))}
        if len(taken) >= size:
            raise FailedPrecondition(
                f"every uid of auth.task_uids.range ({low}-{high}) is assigned; widen the range to add user {user!r}"
            )
        start = int.from_bytes(hashlib.sha256(user.encode()).digest()[:8], "big") % size
        reserved = {a.uid for a in self.accounts.values()}
        for step in range(size):
            uid = low + (start + step) % size
            if uid not in taken and uid not in reserved:
                break
        conn.execute(sql("INSERT INTO task_uids (user, uid) VALUES (:u, :uid)"), {"u": user, "uid": uid})
        return TaskAccount(uid, uid, max_processes=self.max_processes)


def not_isolated_reason(configured: bool = True, euid: int | None = None) -> str:
    """Why this controller's users' tasks are not kept apart from each other and from it, or ""
    when they are (see `iris.core.isolation`, which says the same of a worker daemon)."""
    return isolation.not_isolated_reason("controller", configured, euid)


def host_process_share() -> int:
    """A quarter of the processes (and threads) this host can hold at once: what one task uid may
    hold by default, so tasks forking without end leave the controller room to work."""
    table = []
    for name in ("/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"):
        try:
            with open(name) as f:
                table.append(int(f.read()))
        except (OSError, ValueError):
            pass
    return max(64, min(table or [32768]) // 4)


def secure_state_dir(state_dir: Path) -> None:
    """Makes the state directory unlistable by others and its database and key files private."""
    state_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(state_dir, STATE_DIR_MODE)
    for child in state_dir.iterdir():
        if child.is_file() and not child.is_symlink():
            os.chmod(child, PRIVATE_FILE_MODE)


def give_to(path: Path, account: TaskAccount | None) -> None:
    """Hands a folder (and everything in it) to a task's uid, readable by nobody else."""
    if account is None:
        return
    for root, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            os.lchown(os.path.join(root, name), account.uid, account.gid)
    os.chown(path, account.uid, account.gid)
    os.chmod(path, 0o700)
