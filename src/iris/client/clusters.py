"""The user's named clusters: which controller `iris --cluster NAME` talks to, and the default one.

One YAML file, `~/.iris/clusters.yaml`, rather than a folder of configs: a person edits one short
list by hand, and a cluster's full config may live anywhere (or nowhere, for a cluster someone else
runs). Each entry names the controller's URL and, when this machine has it, the cluster's config
file, so operator commands that need the config (`cluster stop`, `token create`) work by name too:

    default: marin
    clusters:
      marin: {url: http://127.0.0.1:10000, config: /home/alice/fed/marin.yaml}
      cw-h100: {url: http://10.0.0.7:10001}

`iris cluster start` adds the cluster it started; `iris cluster use NAME` sets the default, which
applies when neither --controller, --cluster, --config nor $IRIS_CONTROLLER says otherwise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from iris.core.errors import InvalidArgument


@dataclass(frozen=True, slots=True)
class NamedCluster:
    name: str
    url: str
    config: str = ""


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


def clusters_file() -> str:
    return os.path.join(os.path.expanduser("~"), ".iris", "clusters.yaml")


def load() -> ClusterList:
    """The cluster list (empty when the file does not exist); a malformed file is a clear error."""
    path = clusters_file()
    if not os.path.exists(path):
        return ClusterList()
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
        if not isinstance(entry, dict) or not isinstance(entry.get("url"), str):
            raise InvalidArgument(f"cluster {name!r} in {path} needs a `url:`; fix the entry")
        out.append(NamedCluster(str(name), entry["url"], str(entry.get("config") or "")))
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
        doc["clusters"][c.name] = {"url": c.url, **({"config": c.config} if c.config else {})}
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        yaml.safe_dump(doc, f, sort_keys=False)
    os.replace(tmp, path)


def remember(entry: NamedCluster, make_default: bool = False) -> ClusterList:
    """Adds or updates `entry` (the default changes only when asked: `iris cluster use`)."""
    current = load()
    others = tuple(c for c in current.clusters if c.name != entry.name)
    default = entry.name if make_default else current.default
    updated = ClusterList((*others, entry), default)
    save(updated)
    return updated


def forget(name: str) -> ClusterList:
    current = load()
    current.get(name)
    updated = ClusterList(
        tuple(c for c in current.clusters if c.name != name), "" if current.default == name else current.default
    )
    save(updated)
    return updated


def use(name: str) -> ClusterList:
    current = load()
    current.get(name)
    updated = ClusterList(current.clusters, name)
    save(updated)
    return updated


def default_cluster() -> NamedCluster | None:
    """The default named cluster, if the file sets one (cheap when there is no file)."""
    if not os.path.exists(clusters_file()):
        return None
    current = load()
    return current.get(current.default) if current.default else None
