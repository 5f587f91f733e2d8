"""The cluster config: one YAML file per cluster, validated into frozen models.

Every key is declared here with its type and default, so a typo or a bad value fails at load time
with a message that names the key (`backends.0.capacity.memory: size '8X' is not understood …`)
instead of surfacing later as odd behaviour.
"""

from __future__ import annotations

import os
import types
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from iris.core.errors import InvalidArgument
from iris.core.names import validate_component
from iris.core.suggest import did_you_mean
from iris.core.units import parse_duration, parse_size


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _size(value: Any) -> int:
    try:
        return parse_size(value)
    except InvalidArgument as exc:
        raise ValueError(exc.message) from None


def _duration(value: Any) -> float:
    try:
        return parse_duration(value)
    except InvalidArgument as exc:
        raise ValueError(exc.message) from None


class CapacityConfig(_Model):
    cpu: float = Field(default=float(os.cpu_count() or 1), gt=0)
    memory: int = 8 * 1024**3
    disk: int = 100 * 1024**3

    _sizes = field_validator("memory", "disk", mode="before")(lambda cls, v: _size(v))


class DevicesConfig(_Model):
    gpu: str | None = None
    tpu: str | None = None
    count: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _one_kind(self) -> DevicesConfig:
        if bool(self.gpu) == bool(self.tpu):
            raise ValueError("set exactly one of gpu or tpu (e.g. {gpu: h100, count: 8})")
        return self


class BackendModel(_Model):
    """What every backend kind's config has: its id (unique in the cluster) and its `kind` tag."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    kind: str


class LocalBackendConfig(BackendModel):
    """`kind: local`: simulated hosts of one shape whose attempts run as subprocesses here."""

    kind: Literal["local"] = "local"
    workers: int = Field(default=1, ge=1, le=100_000)
    capacity: CapacityConfig = CapacityConfig()
    devices: DevicesConfig | None = None
    attributes: dict[str, str | int | float | bool] = {}


class WorkersBackendConfig(BackendModel):
    """`kind: workers`: hosts that run `iris worker start --backend ID` dial in and join this pool.

    `attributes` are what a worker must advertise to join (a worker started with different values
    is refused, naming the key); the pool advertises them to federation peers as its own.
    """

    kind: Literal["workers"]
    attributes: dict[str, str | int | float | bool] = {}
    # A worker declared dead (silent past the grace period) is listed as dead this long, then
    # forgotten: dropped from `worker list` and the scheduler's view, so a pool with churn does
    # not grow without bound. Its attempts keep naming it in `job describe` and the database.
    forget_dead_after: float = Field(default=3600.0, gt=0, allow_inf_nan=False)

    _durations = field_validator("forget_dead_after", mode="before")(lambda cls, v: _duration(v))


class SlurmBackendConfig(BackendModel):
    """`kind: slurm`: one Slurm partition; each attempt is one Slurm batch job (see docs/slurm.md)."""

    kind: Literal["slurm"]
    partition: str = Field(min_length=1)
    account: str = ""
    qos: str = ""
    sbatch_args: list[str] = []  # passed to every sbatch as they are, e.g. ["--constraint=a100"]
    slurm_conf: str = ""  # SLURM_CONF for every Slurm command; empty: Slurm's own default
    staging_dir: str = ""  # a folder every Slurm node reads (attempt files, logs); default: state_dir/slurm
    poll_interval: float = Field(default=1.0, gt=0)
    command_timeout: float = Field(default=30.0, gt=0)
    attributes: dict[str, str | int | float | bool] = {}

    _durations = field_validator("poll_interval", "command_timeout", mode="before")(lambda cls, v: _duration(v))


def _backend_kind(value: Any) -> str | None:
    """The tag that picks a backend's config model; a backend without `kind` is a local one."""
    if isinstance(value, dict):
        kind = value.get("kind", "local")
        return kind if isinstance(kind, str) else None
    return getattr(value, "kind", None)


# One entry per backend kind: its `kind` value and its config model. The backend package of that
# kind registers the same model with `iris.backends.registry` (see docs/backends.md).
BACKEND_CONFIG_MODELS: dict[str, type[BackendModel]] = {
    "local": LocalBackendConfig,
    "workers": WorkersBackendConfig,
    "slurm": SlurmBackendConfig,
}

BackendConfig = Annotated[
    Annotated[LocalBackendConfig, Tag("local")]
    | Annotated[WorkersBackendConfig, Tag("workers")]
    | Annotated[SlurmBackendConfig, Tag("slurm")],
    Discriminator(
        _backend_kind,
        custom_error_type="backend_kind",
        custom_error_message="is not a known backend kind",
    ),
]


class PeerConfig(_Model):
    address: str = Field(pattern=r"^https?://")
    # A PEM file of the CAs that may sign an https peer's certificate (or the peer's own certificate);
    # unset: the system's trust store.
    ca: str | None = Field(default=None, min_length=1)


class TlsConfig(_Model):
    """`tls:`: the controller serves `listen` over TLS (its URL is then https://)."""

    certificate: str = Field(min_length=1)  # PEM: the server's certificate, then its chain
    key: str = Field(min_length=1)  # PEM: its private key
    # PEM: the CAs a caller's certificate must be signed by (mutual TLS): a caller without one is
    # refused in the handshake, whatever its token. Unset: callers present none.
    client_ca: str | None = Field(default=None, min_length=1)


class TaskUidsConfig(_Model):
    range: str = Field(default="200000-299999", pattern=r"^\d+-\d+$")
    # false: tasks run as the controller's uid even when it is root, so nothing isolates them from
    # it or from each other (for hosts where tasks must use files private to the controller's uid)
    enabled: bool = True
    # Processes and threads one user's tasks may hold at once on a host (RLIMIT_NPROC of their uid),
    # so a task forking without end cannot fill the host's process table; 0: a quarter of it.
    max_processes: int = Field(default=0, ge=0)


TOKEN_ROLES = ("admin", "user", "dashboard", "worker", "federation-peer", "task")
DEFAULT_MAX_TOKEN_LIFETIME = {
    "admin": 30 * 86400.0,
    "user": 30 * 86400.0,
    "dashboard": 90 * 86400.0,
    "worker": 365 * 86400.0,
    "federation-peer": 3600.0,
    "task": 7 * 86400.0,
}


# A cluster name has no '.': a peer files a received job under `<requester>.<name>`, and the first
# '.' must end the requester (`iris.federation.ids`), so no two clusters' names can collide there.
CLUSTER_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]*$"
ClusterName = Annotated[str, Field(pattern=CLUSTER_NAME_PATTERN)]


class AuthConfig(_Model):
    # Networks whose tokenless TCP callers are local_admin: an explicit opt-in for single-user
    # set-ups. Without it a tokenless TCP caller is anonymous; the operator's own `iris` reaches the
    # controller tokenless through its Unix socket instead.
    trusted_cidrs: list[str] = []
    signing_key: str | None = None
    federation_peers: dict[ClusterName, str] = {}
    allowed_submitters: list[str] = ["*"]
    # When the controller runs as root, each user's tasks run as the mapped account, or else as a
    # uid from this range (recorded per user in the database).
    task_uids: TaskUidsConfig = TaskUidsConfig()
    task_accounts: dict[str, str] = {}
    # The longest a token of each role may live (`30d`); longer ones are refused when presented.
    max_token_lifetime: dict[str, float] = {}

    @field_validator("max_token_lifetime", mode="before")
    @classmethod
    def _lifetimes(cls, v: Any) -> dict[str, float]:
        if not isinstance(v, dict):
            raise ValueError("must be a mapping of role to duration, e.g. {user: 30d, admin: 1d}")
        unknown = sorted(set(v) - set(TOKEN_ROLES))
        if unknown:
            hint = did_you_mean(unknown[0], TOKEN_ROLES)
            raise ValueError(
                f"unknown role {unknown[0]!r}; {hint + ' ' if hint else ''}roles are {', '.join(TOKEN_ROLES)}"
            )
        out = {k: _duration(d) for k, d in v.items()}
        bad = [k for k, d in out.items() if d <= 0]
        if bad:
            raise ValueError(f"{bad[0]}: a token lifetime must be greater than zero")
        return out

    def token_lifetime(self, role: str) -> float:
        """The longest a token of `role` may live, in seconds."""
        return self.max_token_lifetime.get(role, DEFAULT_MAX_TOKEN_LIFETIME.get(role, 30 * 86400.0))


class TimeLimitConfig(_Model):
    """One band's wall-clock limits, in seconds (0: none): `default` is given to a job submitted
    without `--timeout` (the maximum when only that is set), and a job asking for more than
    `max` is refused at submit. The scheduler plans reservations with these limits."""

    default: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    max: float = Field(default=0.0, ge=0, allow_inf_nan=False)

    _durations = field_validator("default", "max", mode="before")(lambda cls, v: _duration(v))

    @model_validator(mode="after")
    def _default_within_max(self) -> TimeLimitConfig:
        if self.max and self.default > self.max:
            raise ValueError(f"default ({self.default:g}s) is above max ({self.max:g}s)")
        return self


BAND_LABELS = ("production", "interactive", "batch")


class ControllerSettings(_Model):
    tick_interval: float = 1.0
    federation_heartbeat_interval: float = 30.0
    federation_sync_interval: float = 3.0
    max_federation_handoffs_per_cycle: int = Field(default=8, ge=1)
    # How long a peer keeps its changelog of received jobs (tombstones included): a parent away for
    # longer gets a full resync, which carries the active jobs plus what changed within this window.
    federation_changelog_retention: float = Field(default=3600.0, gt=0)
    # A handed-off job its peer has not placed for this long is withdrawn there and queued for
    # another peer (one the peer reports unschedulable is withdrawn at once). 0: only the latter.
    federation_reroute_after: float = Field(default=600.0, ge=0)
    worker_grace_period: float = 30.0
    client_max_age_days: int = Field(default=14, ge=0)
    # Output kept per attempt (stdout and stderr together), in bytes of the database it takes (each
    # line costs its bytes and its row's overhead); past it, a marker line and the rest is discarded
    # while the attempt runs on. 0 keeps everything.
    log_max_output: int = Field(default=100 * 1024**2, ge=0)
    # Output kept per job, over all its tasks and attempts (retries included) and the lines relayed
    # from a peer, counted the same way; past it, a marker line and the rest of the job's output is
    # discarded. 0: no cap.
    log_max_job_output: int = Field(default=2 * 1024**3, ge=0)
    # Output the retained jobs of one user may hold in the database, counted the same way; past it,
    # their jobs' further output is discarded (with a line saying so) until older logs expire. 0: no cap.
    max_user_log_bytes: int = Field(default=20 * 1024**3, ge=0)
    # Below this much free space on the database's disk, the output of the users storing the most is
    # refused first (and below a quarter of it, everyone's), so submits and state still fit. Unset:
    # 5 % of that disk, at most 1G. 0: never.
    min_free_disk: int | None = Field(default=None, ge=0)
    # Finished jobs' logs and attempt folders are deleted this long after the job ended. 0 keeps them.
    log_retention: float = Field(default=7 * 86400.0, ge=0)
    # Tasks (a job counts one per replica) one user (with their tasks) may submit a second, after a
    # burst of `submit_burst`; past it, a submit is refused with when to retry (see
    # iris.controller.api.submit_rate). 0: no limit.
    submit_rate: float = Field(default=200.0, ge=0, allow_inf_nan=False)
    submit_burst: int = Field(default=10_000, ge=1)
    query_timeout: float = 10.0  # the most one raw query (`iris query`) may run
    tick_stall_timeout: float = 60.0  # no completed pass of the tick for this long: unhealthy
    watchdog_exit_after: float = 30.0  # unhealthy this long: the controller exits (0: never)
    # A connection's request head must be whole, and its body may pause, at most this long; idle
    # or trickling connections are closed (see iris.controller.http.connections).
    request_read_timeout: float = 20.0
    # The endpoint relay (`/proxy/t/…`): how long it waits for a served app's next byte, and how many
    # relayed requests (and WebSockets) one client, and one endpoint, may hold open at once; all of
    # them together hold at most a quarter of the controller's connections (see http/proxy.py).
    proxy_read_timeout: float = 120.0
    proxy_max_per_caller: int = Field(default=32, ge=1)
    proxy_max_per_endpoint: int = Field(default=128, ge=1)
    # `/metrics` (Prometheus' text format) answers anyone by default, as exporters do: its labels
    # name no user or job. True: only a caller with an admin or dashboard token (or the operator).
    metrics_require_token: bool = False
    # Connections open at once; one more is answered 503 and closed. 0: half the process's
    # descriptor limit, so connections never take the descriptors the controller's own work needs.
    max_connections: int = Field(default=0, ge=0)
    # Per band (production, interactive, batch): the time limit a job gets without `--timeout`,
    # and the most it may ask for (see TimeLimitConfig). Unlisted bands: no default, no maximum.
    time_limits: dict[str, TimeLimitConfig] = {}

    @field_validator("time_limits")
    @classmethod
    def _band_labels(cls, v: dict[str, TimeLimitConfig]) -> dict[str, TimeLimitConfig]:
        for band in v:
            if band not in BAND_LABELS:
                raise ValueError(f"{band!r} is not a band; use {', '.join(BAND_LABELS)}")
        return v

    _durations = field_validator(
        "tick_interval",
        "federation_heartbeat_interval",
        "federation_sync_interval",
        "federation_changelog_retention",
        "federation_reroute_after",
        "worker_grace_period",
        "log_retention",
        "query_timeout",
        "tick_stall_timeout",
        "watchdog_exit_after",
        "request_read_timeout",
        "proxy_read_timeout",
        mode="before",
    )(lambda cls, v: _duration(v))
    _sizes = field_validator(
        "log_max_output", "log_max_job_output", "max_user_log_bytes", "min_free_disk", mode="before"
    )(lambda cls, v: _size(v))

    @field_validator(
        "tick_interval", "query_timeout", "tick_stall_timeout", "request_read_timeout", "proxy_read_timeout"
    )
    @classmethod
    def _positive(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("must be greater than zero")
        return v


class BudgetsConfig(_Model):
    """Per-user budgets, in resource value (1000 per accelerator + 1 per GiB of memory + 5 per core,
    summed over a user's placed work outside the batch band, here and on federation peers). A user
    over budget keeps scheduling, but their interactive work competes as batch."""

    # For users not listed; None: unlimited. Finite: leaving a user out is how to say unlimited.
    default: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    users: dict[str, Annotated[float, Field(allow_inf_nan=False)]] = {}

    @field_validator("default", "users", mode="before")
    @classmethod
    def _numbers(cls, v: Any) -> Any:
        amounts = v.items() if isinstance(v, dict) else [("", v)]
        for user, amount in amounts:
            if isinstance(amount, bool | str):
                where = f"{user}: " if user else ""
                raise ValueError(f"{where}{amount!r} is not a number; a budget is a resource value such as 8000")
        return v

    @field_validator("users")
    @classmethod
    def _non_negative(cls, v: dict[str, float]) -> dict[str, float]:
        for user in v:
            try:
                validate_component("user", user)
            except InvalidArgument as exc:
                raise ValueError(f"{user!r} can never match a user: {exc.message}") from None
        bad = sorted(u for u, amount in v.items() if amount < 0)
        if bad:
            raise ValueError(f"{bad[0]}: a budget must be zero or more")
        return v


class DefaultsConfig(_Model):
    task_env: dict[str, str] = {}


class ClusterConfig(_Model):
    name: str = Field(pattern=CLUSTER_NAME_PATTERN)
    listen: str = "127.0.0.1:10000"
    public_url: str | None = None
    # The public cluster this one's serving endpoints are reached through (capability URLs are
    # minted against it, tagged with this cluster's name); None: against this cluster's own URL.
    federation_public_parent: str | None = Field(default=None, pattern=r"^https?://")
    state_dir: str = "./state"
    tls: TlsConfig | None = None
    backends: list[BackendConfig] = Field(min_length=1)
    peers: dict[ClusterName, PeerConfig] = {}
    auth: AuthConfig = AuthConfig()
    controller: ControllerSettings = ControllerSettings()
    defaults: DefaultsConfig = DefaultsConfig()
    budgets: BudgetsConfig = BudgetsConfig()

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        host, _, port = v.rpartition(":")
        if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"{v!r} must be HOST:PORT, e.g. 127.0.0.1:10000")
        return v

    @model_validator(mode="after")
    def _unique_backends(self) -> ClusterConfig:
        ids = [b.id for b in self.backends]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"backend ids must be unique; repeated: {', '.join(dupes)}")
        if self.name in self.peers:
            raise ValueError(f"peers: a cluster cannot peer with itself ({self.name})")
        if self.tls is not None and self.public_url is not None and not self.public_url.startswith("https://"):
            raise ValueError(f"public_url: {self.public_url!r} must start with https:// when tls is set")
        if self.tls is not None and self.public_url is None and self.host.strip("[]") in ("0.0.0.0", "::", ""):
            raise ValueError(
                f"public_url: with tls and listen {self.listen!r} (every address), give the https:// URL clients"
                " reach the controller by, naming a host its certificate is for (e.g. https://iris.lab.example:"
                f"{self.port})"
            )
        return self

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0]

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])

    @property
    def url(self) -> str:
        return self.public_url or f"{'https' if self.tls else 'http'}://{self.listen}"

    @property
    def state_path(self) -> Path:
        return Path(self.state_dir).expanduser()


def _without_kind_tags(loc: tuple) -> tuple:
    """`backends.0.local.workers` → `backends.0.workers`: the kind tag is not a key the user wrote."""
    if len(loc) > 2 and loc[0] == "backends" and loc[2] in BACKEND_CONFIG_MODELS:
        return loc[:2] + loc[3:]
    return loc


def _keys_at(loc: tuple) -> set[str]:
    """The keys the mapping at `loc` (as pydantic reports it, kind tags included) accepts."""
    types_here: list[Any] = [ClusterConfig]
    for part in loc:
        types_here = [child for tp in types_here for child in _children(tp, part)]
    return {name for tp in types_here if isinstance(tp, type) and issubclass(tp, BaseModel) for name in tp.model_fields}


def _children(tp: Any, part: str | int) -> list[Any]:
    """The types that may sit under key or index `part` of a value of type `tp`."""
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        members = [arg for arg in get_args(tp) if arg is not type(None)]
        if isinstance(part, str) and part in BACKEND_CONFIG_MODELS:  # the discriminator's tag
            return [BACKEND_CONFIG_MODELS[part]]
        return [child for arg in members for child in _children(arg, part)]
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        field = tp.model_fields.get(str(part))
        return [field.annotation] if field is not None else []
    if origin is list and isinstance(part, int):
        return [get_args(tp)[0]]
    if origin is dict:
        return [get_args(tp)[1]]
    return []


def _format_error(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in _without_kind_tags(err["loc"])) or "(top level)"
        msg = err["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        if err["type"] == "extra_forbidden":
            hint = did_you_mean(str(err["loc"][-1]), _keys_at(err["loc"][:-1]))
            msg = "is not a known key" + (f"; {hint}" if hint else "")
        if err["type"] == "string_pattern_mismatch" and err["ctx"].get("pattern") == CLUSTER_NAME_PATTERN:
            loc = _without_kind_tags(err["loc"])
            if loc[-1] == "[key]":
                where = ".".join(str(p) for p in loc[:-2])
            msg = (
                f"{err['input']!r} is not a cluster name: use lowercase letters, digits, '_' or '-', starting"
                " with a letter or digit (no '.': a peer files received jobs under '<cluster>.<job name>')"
            )
        if err["type"] == "backend_kind":
            kind = err["input"].get("kind") if isinstance(err["input"], dict) else None
            where += ".kind"
            hint = did_you_mean(str(kind), BACKEND_CONFIG_MODELS) if kind else ""
            msg = f"{kind!r} is not a backend kind; {hint + ' ' if hint else ''}use one of: {', '.join(BACKEND_CONFIG_MODELS)}"
        lines.append(f"{where}: {msg}")
    return "; ".join(lines)


def parse_config(data: Any, base_dir: Path | None = None, source: str = "config") -> ClusterConfig:
    """Validates a config mapping; relative `state_dir` is resolved against `base_dir`."""
    if not isinstance(data, dict):
        raise InvalidArgument(f"{source}: the top level must be a mapping of keys (name, backends, …)")
    try:
        config = ClusterConfig.model_validate(data)
    except ValidationError as exc:
        raise InvalidArgument(f"{source}: {_format_error(exc)}") from None
    if base_dir is not None:
        config = _resolve_paths(config, base_dir)
    return config


def _resolve_paths(config: ClusterConfig, base_dir: Path) -> ClusterConfig:
    """Relative paths in a config file (state_dir, keys, certificates) are relative to the file's folder."""

    def resolve(value: str) -> str:
        p = Path(value).expanduser()
        return value if p.is_absolute() else str((base_dir / p).resolve())

    auth = config.auth
    peers = {k: v if "-----BEGIN" in v else resolve(v) for k, v in auth.federation_peers.items()}
    auth = auth.model_copy(
        update={
            "signing_key": resolve(auth.signing_key) if auth.signing_key else None,
            "federation_peers": peers,
        }
    )
    tls = config.tls
    if tls is not None:
        tls = tls.model_copy(
            update={k: resolve(getattr(tls, k)) for k in ("certificate", "key", "client_ca") if getattr(tls, k)}
        )
    peer_configs = {k: p.model_copy(update={"ca": resolve(p.ca)}) if p.ca else p for k, p in config.peers.items()}
    backends = [
        b.model_copy(update={k: resolve(getattr(b, k)) for k in ("slurm_conf", "staging_dir") if getattr(b, k)})
        if isinstance(b, SlurmBackendConfig)
        else b
        for b in config.backends
    ]
    return config.model_copy(
        update={
            "state_dir": resolve(config.state_dir),
            "auth": auth,
            "backends": backends,
            "tls": tls,
            "peers": peer_configs,
        }
    )


def load_config(path: str | os.PathLike) -> ClusterConfig:
    """Reads and validates a cluster YAML file."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise InvalidArgument(f"cannot read config {p}: {exc.strerror}") from None
    try:
        data = yaml.load(text, Loader=_unique_key_loader())
    except _RepeatedKey as exc:
        raise InvalidArgument(f"{p}: {exc}") from None
    except yaml.YAMLError as exc:
        raise InvalidArgument(f"{p}: not valid YAML: {exc}") from None
    return parse_config(data, base_dir=p.parent.resolve(), source=str(p))


class _RepeatedKey(Exception):
    """A mapping in the config names one key twice."""


def _unique_key_loader() -> type:
    """YAML's safe loader, except that a key given twice in one mapping is an error.

    Plain YAML keeps the last of two `name:` lines without a word, so a pasted or mistyped block
    would silently replace what was written above it; a config is short enough to say so instead.
    """

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen: set = set()
            for key_node, _value in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *defaults` then overriding a key is what merges are for
                key = self.construct_object(key_node, deep=True)
                try:
                    repeated = key in seen
                    seen.add(key)
                except TypeError:
                    continue  # an unhashable key: the loader itself refuses it
                if repeated:
                    raise _RepeatedKey(
                        f"line {key_node.start_mark.line + 1}: {key!r} is given twice in the same block;"
                        " keep one (YAML would silently use the last)"
                    )
            return super().construct_mapping(node, deep)

    return Loader


def iris_home() -> Path:
    return Path(os.environ.get("IRIS_HOME", "~/.iris/local")).expanduser()


def local_config(port: int = 10000) -> ClusterConfig:
    """The embedded default for `iris cluster start --local`: one local backend sized to this host."""
    try:
        import psutil

        memory = int(psutil.virtual_memory().total)
        disk = int(psutil.disk_usage(str(iris_home().parent if iris_home().parent.exists() else Path.home())).free)
    except Exception:  # psutil unavailable or the path unreadable: fall back to modest sizes
        memory, disk = 8 * 1024**3, 100 * 1024**3
    return parse_config(
        {
            "name": "local",
            "listen": f"127.0.0.1:{port}",
            "state_dir": str(iris_home()),
            "backends": [
                {
                    "id": "local",
                    "kind": "local",
                    "workers": 1,
                    "capacity": {"cpu": float(os.cpu_count() or 1), "memory": memory, "disk": disk},
                }
            ],
        }
    )
