"""The user's named clusters: which controller `iris --cluster NAME` talks to, and the default one.

One YAML file, `~/.iris/clusters.yaml`, rather than a folder of configs: a person edits one short
list by hand, and a cluster's full config may live anywhere (or nowhere, for a cluster someone else
runs). Each entry names the controller's URL and, when this machine has it, the cluster's config
file, so operator commands that need the config (`cluster stop`, `token create`) work by name too:

    default: marin
    clusters:
      marin: {url: http://127.0.0.1:10000, config: /home/alice/fed/marin.yaml}
      cw-h100: {url: http://10.0.0.7:10001}
      lab: {url: https://iris.lab.example:10443, ca: ~/.iris/lab-ca.pem}

An https cluster's entry may name `ca:`, the PEM file of the CAs that may sign its certificate
(default: the system's store), and `client_cert:` / `client_key:`, the certificate this machine
presents to a controller that asks for one.

`iris cluster start` adds the cluster it started; `iris cluster use NAME` sets the default, which
applies when neither --controller, --cluster, --config nor $IRIS_CONTROLLER says otherwise.

Reading the list is on the path of every command that names no controller, and importing PyYAML
alone costs about 13 ms there, more than the rest of `iris job run --no-wait` (whose budget is
three times a bare `python -c pass`). A hand-edited YAML file cannot be read exactly by anything
less than a YAML parser, so the parsed list is kept beside it, in `.clusters.cache.json`, stamped
with the file's modification time, change time, size and inode: a read whose stamp matches takes
the list from there. The cache is written only for a file last changed more than two seconds
earlier, so a second edit within one tick of a coarse file-system clock cannot hide behind an
unchanged stamp (the change time moves on every write and cannot be set back).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

from iris.core.errors import InvalidArgument, Unavailable


@dataclass(frozen=True, slots=True)
class NamedCluster:
    name: str
    url: str
    config: str = ""
    ca: str = ""  # PEM file of the CAs that may sign an https controller's certificate
    client_cert: str = ""  # PEM certificate presented to a controller that asks for one
    client_key: str = ""  # its key, when not in `client_cert`

    def entry(self) -> dict[str, str]:
        """Its mapping in clusters.yaml, without the keys left unset."""
        keys = ("url", "config", "ca", "client_cert", "client_key")
        return {k: getattr(self, k) for k in keys if k == "url" or getattr(self, k)}


@dataclass(frozen=True, slots=True)
class ClusterList:
    clusters: tuple[NamedCluster, ...] = ()
    default: str = ""

    def get(self, name: str) -> NamedCluster:
        for c in self.clusters:
            if c.name == name:
                return c
        known = ", ".join(c.name for c in self.clusters) or "none yet"
        raise InvalidArgument(
            f"no cluster named {name!r} in {clusters_file()} (known: {known}); add it with"
            " `iris cluster add NAME --url URL` or start it with `iris cluster start`"
        )


def unreachable_error(cluster: NamedCluster, reason: str) -> Unavailable:
    """The error for a named cluster whose controller does not answer: which cluster, where it was
    looked for, and how to start it (from its config, when this machine has it) or pick another."""
    if cluster.config or cluster.name == "local":  # `cluster start` finds the config (or --local) by name
        start = f"start it with `iris --cluster {cluster.name} cluster start --detach`"
    else:
        start = "it was added by URL alone, so it runs elsewhere: ask whoever runs it to start it"
    return Unavailable(
        f"cannot reach cluster {cluster.name} at {cluster.url} ({reason}); {start},"
        " or pick another with --cluster NAME (`iris cluster list` shows which answer)"
    )


def unchosen_unreachable(url: str, reason: str) -> Unavailable:
    """The error for the default address not answering when no cluster was chosen at all: the
    clusters the list holds elsewhere are named, since one of them is likely the one meant (a
    cluster started with `--port` is listed, but only `iris cluster use` makes it the default)."""
    from iris.rpc.transport import unreachable

    elsewhere = [c for c in load().clusters if c.url.rstrip("/") != url.rstrip("/")]
    if not elsewhere:
        return unreachable(url, reason)
    listed = ", ".join(f"{c.name} at {c.url}" for c in elsewhere)
    return Unavailable(
        f"cannot reach the Iris controller at {url} ({reason}), the address used when no cluster is chosen;"
        f" {clusters_file()} lists {listed}: pick one with --cluster NAME, make it the default with"
        " `iris cluster use NAME`, or point at a controller with --controller URL or IRIS_CONTROLLER"
    )


def clusters_file() -> str:
    return os.path.join(os.path.expanduser("~"), ".iris", "clusters.yaml")


_CACHE_VERSION = 2
_RACY_NS = 2_000_000_000  # a file changed this recently is parsed anew, not cached


def _cache_file(path: str) -> str:
    return os.path.join(os.path.dirname(path), ".clusters.cache.json")


def load() -> ClusterList:
    """The cluster list (empty when the file does not exist); a malformed file is a clear error."""
    path = clusters_file()
    try:
        st = os.stat(path)
    except OSError:
        return ClusterList()
    stamp = [st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino]
    cached = _cached(path, stamp)
    if cached is not None:
        return cached
    clusters = _parse(path)
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > _RACY_NS:
        _keep(path, stamp, clusters)
    return clusters


def _cached(path: str, stamp: list[int]) -> ClusterList | None:
    """The list kept for the file with this stamp, or None (no cache, another stamp, a bad cache)."""
    try:
        with open(_cache_file(path)) as f:
            doc = json.load(f)
        if doc["version"] != _CACHE_VERSION or doc["stamp"] != stamp:
            return None
        entries = tuple(NamedCluster(*(str(part) for part in entry)) for entry in doc["clusters"])
        return ClusterList(entries, str(doc["default"]))
    except (OSError, ValueError, LookupError, TypeError):
        return None


def _keep(path: str, stamp: list[int], clusters: ClusterList) -> None:
    """Writes the parsed list beside the file, atomically; a cache that cannot be written is skipped."""
    doc = {
        "version": _CACHE_VERSION,
        "stamp": stamp,
        "default": clusters.default,
        "clusters": [[c.name, c.url, c.config, c.ca, c.client_cert, c.client_key] for c in clusters.clusters],
    }
    target = _cache_file(path)
    tmp = f"{target}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, target)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _parse(path: str) -> ClusterList:
    """The list in the YAML file at `path`; a malformed file is a clear error."""
    import yaml

    try:
        with open(path) as f:
            doc = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidArgument(f"cannot read {path}: {exc}; fix or remove the file") from None
    entries = doc.get("clusters") if isinstance(doc, dict) else None
    if not isinstance(entries, dict):
        raise InvalidArgument(f"{path} needs a `clusters:` mapping of NAME: {{url: URL}}; fix or remove the file")
    out = []
    for name, entry in entries.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("url"), str) or not entry["url"].strip():
            raise InvalidArgument(f"cluster {name!r} in {path} needs a `url:`; fix the entry")
        paths = []
        for key in ("config", "ca", "client_cert", "client_key"):
            value = entry.get(key) or ""
            if not isinstance(value, str):
                raise InvalidArgument(f"cluster {name!r} in {path}: `{key}:` must be a file path; fix the entry")
            paths.append(os.path.expanduser(value) if key != "config" else value)
        out.append(NamedCluster(str(name), entry["url"], *paths))
    return ClusterList(tuple(out), str(doc.get("default") or ""))


def save(clusters: ClusterList) -> None:
    """Writes the list atomically (a reader never sees half a file)."""
    import yaml

    path = clusters_file()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    doc: dict = {"clusters": {}}
    if clusters.default:
        doc["default"] = clusters.default
    for c in clusters.clusters:
        doc["clusters"][c.name] = c.entry()
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        yaml.safe_dump(doc, f, sort_keys=False)
    os.replace(tmp, path)


@contextlib.contextmanager
def _changing() -> Iterator[None]:
    """Holds the list's lock while one change reads and rewrites it: two `iris cluster start` at
    once each wrote the list it had read, and one cluster was lost."""
    path = clusters_file()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(os.path.join(os.path.dirname(path), ".clusters.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def remember(entry: NamedCluster, make_default: bool = False) -> ClusterList:
    """Adds or updates `entry` (the default changes only when asked: `iris cluster use`)."""
    with _changing():
        return _remember(entry, make_default)


def _remember(entry: NamedCluster, make_default: bool) -> ClusterList:
    current = load()
    others = tuple(c for c in current.clusters if c.name != entry.name)
    default = entry.name if make_default else current.default
    updated = ClusterList((*others, entry), default)
    save(updated)
    return updated


def add(entry: NamedCluster, replace: bool = False) -> NamedCluster | None:
    """Adds `entry` by hand (`iris cluster add`); returns the entry it replaced, if any.

    A name already in the list is refused unless `replace` is set, so that a typo or a second
    cluster given the same name never silently points every `--cluster NAME` elsewhere. Adding an
    entry exactly as it stands changes nothing and is not an error."""
    with _changing():
        current = load()
        previous = next((c for c in current.clusters if c.name == entry.name), None)
        if previous == entry:
            return previous
        if previous is not None and not replace:
            raise InvalidArgument(
                f"cluster {entry.name!r} is already in {clusters_file()} ({previous.url}); pass --replace to point"
                f" it at {entry.url} instead, or remove it first with `iris cluster remove {entry.name}`"
            )
        _remember(entry, False)
        return previous


def forget(name: str) -> ClusterList:
    with _changing():
        current = load()
        current.get(name)
        updated = ClusterList(
            tuple(c for c in current.clusters if c.name != name), "" if current.default == name else current.default
        )
        save(updated)
        return updated


def use(name: str) -> ClusterList:
    with _changing():
        current = load()
        current.get(name)
        updated = ClusterList(current.clusters, name)
        save(updated)
        return updated


def default_cluster() -> NamedCluster | None:
    """The default named cluster, if the file sets one (cheap when there is no file)."""
    current = load()
    return current.get(current.default) if current.default else None
