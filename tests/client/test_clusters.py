"""The named-cluster list is read from its YAML file, or from the parsed copy kept beside it while the file is unchanged."""

from __future__ import annotations

import os
import sys
import time

import pytest

from iris.client import clusters
from iris.core.errors import InvalidArgument, Unavailable

YAML = "default: marin\nclusters:\n  marin: {url: 'http://127.0.0.1:10000', config: /etc/marin.yaml}\n  cw: {url: http://10.0.0.7:1}\n"


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    # The files here were written a moment ago (utime cannot move a change time back): keep them anyway.
    monkeypatch.setattr(clusters, "_RACY_NS", 0)
    (tmp_path / ".iris").mkdir()
    return tmp_path / ".iris"


def _write(home, text: str, age_s: float = 60) -> None:
    path = home / "clusters.yaml"
    path.write_text(text)
    then = time.time() - age_s
    os.utime(path, (then, then))


def _no_yaml(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)  # `import yaml` now fails: only the kept copy can answer


def test_clusters_unchanged_file_is_read_from_the_kept_copy_without_yaml(home, monkeypatch):
    _write(home, YAML)
    first = clusters.load()
    assert first.default == "marin" and first.get("marin").config == "/etc/marin.yaml"
    assert (home / ".clusters.cache.json").exists()
    _no_yaml(monkeypatch)
    assert clusters.load() == first
    assert clusters.default_cluster() == clusters.NamedCluster("marin", "http://127.0.0.1:10000", "/etc/marin.yaml")


def test_clusters_an_edited_file_is_parsed_again(home, monkeypatch):
    _write(home, YAML)
    clusters.load()
    _write(home, YAML.replace("10000", "10001").replace("default: marin", "default: cw"))
    again = clusters.load()
    assert again.get("marin").url == "http://127.0.0.1:10001" and again.default == "cw"
    _no_yaml(monkeypatch)
    assert clusters.load() == again  # and kept again


def test_clusters_a_file_changed_just_now_is_not_kept(home, monkeypatch):
    monkeypatch.setattr(clusters, "_RACY_NS", 3600 * 10**9)
    _write(home, YAML, age_s=0)
    assert clusters.load().default == "marin"
    assert not (home / ".clusters.cache.json").exists()


@pytest.mark.parametrize("cache", ["{not json", '{"version": 1}', '{"version": 1, "stamp": 5, "clusters": 7}', "[]"])
def test_clusters_a_damaged_kept_copy_is_ignored(home, cache):
    _write(home, YAML)
    (home / ".clusters.cache.json").write_text(cache)
    assert clusters.load().get("cw").url == "http://10.0.0.7:1"


def test_clusters_a_malformed_file_is_a_clear_error_every_time(home):
    _write(home, "clusters: [just, a, list]\n")
    for _ in range(2):
        with pytest.raises(InvalidArgument, match="needs a `clusters:` mapping"):
            clusters.load()
    assert not (home / ".clusters.cache.json").exists()


def test_clusters_no_file_is_an_empty_list(home):
    assert clusters.load() == clusters.ClusterList() and clusters.default_cluster() is None


@pytest.mark.parametrize("url", ["''", "'   '"])
def test_clusters_an_entry_with_an_empty_url_is_a_clear_error(home, url):
    _write(home, f"default: marin\nclusters:\n  marin: {{url: {url}}}\n")
    with pytest.raises(InvalidArgument, match="cluster 'marin' in .* needs a `url:`"):
        clusters.load()


def test_clusters_default_address_down_names_the_listed_clusters_and_how_to_pick_one(home, monkeypatch):
    from iris.cli.main import CliContext
    from iris.client import client as client_module
    from tests.conftest import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    monkeypatch.delenv("IRIS_CONTROLLER", raising=False)
    monkeypatch.setattr(client_module, "DEFAULT_URL", dead)
    _write(home, "clusters:\n  local: {url: 'http://127.0.0.1:10610'}\n")
    with pytest.raises(Unavailable) as raised:
        CliContext(None, None, "table").client().cluster_info()
    message = str(raised.value)
    assert f"cannot reach the Iris controller at {dead}" in message
    assert "lists local at http://127.0.0.1:10610: pick one with --cluster NAME" in message
    assert "`iris cluster use NAME`" in message


def test_clusters_default_address_down_with_nothing_else_listed_says_how_to_start_one(home):
    _write(home, "clusters:\n  local: {url: 'http://127.0.0.1:10000'}\n")
    message = str(clusters.unchosen_unreachable("http://127.0.0.1:10000", "connection refused"))
    assert "start one with `iris cluster start --local`" in message and "lists" not in message


def test_clusters_remembered_by_many_processes_at_once_are_all_kept(tmp_path):
    # As `iris cluster start` run for several clusters at once: each adds its own entry.
    import subprocess

    script = (
        "import sys; from iris.client.clusters import NamedCluster, remember;"
        " remember(NamedCluster(sys.argv[1], 'http://127.0.0.1:' + sys.argv[2]))"
    )
    env = {**os.environ, "HOME": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", script, f"c{i}", str(20000 + i)], env=env) for i in range(8)]
    assert [p.wait(timeout=60) for p in procs] == [0] * 8
    env_home = os.environ.get("HOME")
    try:
        os.environ["HOME"] = str(tmp_path)
        kept = clusters.load()
    finally:
        os.environ["HOME"] = env_home or ""
    assert sorted(c.name for c in kept.clusters) == [f"c{i}" for i in range(8)]


def test_clusters_an_https_entry_keeps_its_ca_and_client_certificate_through_the_kept_copy(home, monkeypatch):
    _write(home, "clusters:\n  lab: {url: 'https://iris.lab:10443', ca: ~/lab-ca.pem, client_cert: /c.pem}\n")
    lab = clusters.load().get("lab")
    assert lab.ca == os.path.expanduser("~/lab-ca.pem") and lab.client_cert == "/c.pem" and lab.client_key == ""
    _no_yaml(monkeypatch)
    assert clusters.load().get("lab") == lab


def test_clusters_a_saved_entry_writes_only_the_keys_it_sets(home):
    clusters.save(clusters.ClusterList((clusters.NamedCluster("lab", "https://iris.lab", ca="/ca.pem"),)))
    text = (home / "clusters.yaml").read_text()
    assert "ca: /ca.pem" in text and "config" not in text and "client_cert" not in text


def test_clusters_a_ca_that_is_not_a_path_is_refused(home):
    _write(home, "clusters:\n  lab: {url: 'https://iris.lab', ca: [a, b]}\n")
    with pytest.raises(InvalidArgument, match="`ca:` must be a file path"):
        clusters.load()
