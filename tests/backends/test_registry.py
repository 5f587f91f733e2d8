"""Backends are built by kind through one registry; each kind's config rejects keys it lacks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import Field

from iris.backends import registry
from iris.backends.local import LocalBackend
from iris.backends.protocol import BackendContext
from iris.core.config import BACKEND_CONFIG_MODELS, BackendModel, LocalBackendConfig, parse_config
from iris.core.errors import InvalidArgument

SRC = Path(__file__).resolve().parents[2] / "src" / "iris"


def _config(backend: dict):
    return parse_config({"name": "c", "backends": [backend]})


def test_registry_builds_local_backend_from_its_config(tmp_path):
    cfg = _config({"id": "gpu", "kind": "local", "workers": 3, "devices": {"gpu": "h100", "count": 8}})
    woken = []
    backend = registry.build(cfg.backends[0], BackendContext("c", tmp_path, "http://x", wake=lambda: woken.append(1)))
    try:
        assert isinstance(backend, LocalBackend)
        description = backend.describe()
        assert (description.id, description.kind) == ("gpu", "local")
        assert description.attributes["device-variant"] == "h100"
        assert [w.worker_id for w in backend.workers()] == ["gpu-0", "gpu-1", "gpu-2"]
        assert (tmp_path / "attempts").is_dir()
    finally:
        backend.shutdown()


def test_config_without_kind_is_local():
    assert isinstance(_config({"id": "cpu"}).backends[0], LocalBackendConfig)


def test_config_unknown_kind_names_the_key_and_the_known_kinds():
    with pytest.raises(InvalidArgument) as err:
        _config({"id": "cpu", "kind": "slurmm"})
    assert (
        "backends.0.kind: 'slurmm' is not a backend kind; did you mean 'slurm'? use one of: local" in err.value.message
    )


def test_config_typo_in_a_kind_key_names_the_key_without_the_kind_tag():
    with pytest.raises(InvalidArgument) as err:
        _config({"id": "cpu", "kind": "local", "workrs": 2})
    assert err.value.message == "config: backends.0.workrs: is not a known key; did you mean 'workers'?"


def test_every_declared_kind_is_registered_with_its_model():
    for kind, model in BACKEND_CONFIG_MODELS.items():
        entry = registry.lookup(kind)
        assert entry.config_model is model and entry.kind == kind


def test_register_refuses_a_model_the_config_does_not_declare():
    class OtherConfig(BackendModel):
        kind: str = "local"
        size: int = Field(default=1)

    with pytest.raises(TypeError, match="add the model to BackendConfig"):
        registry.register("local", OtherConfig, lambda config, context: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="declares no model"):
        registry.register("nowhere", OtherConfig, lambda config, context: None)  # type: ignore[arg-type,return-value]
    assert registry.lookup("local").config_model is LocalBackendConfig


def test_lookup_of_an_unknown_kind_is_a_clear_error():
    with pytest.raises(InvalidArgument, match="backend kind 'nowhere' is not known; use one of: local"):
        registry.lookup("nowhere")


def test_controller_names_no_concrete_backend():
    for path in (SRC / "controller").rglob("*.py"):
        text = path.read_text()
        assert "iris.backends.local" not in text and "LocalBackend(" not in text, path
        assert 'kind == "local"' not in text and "kind == 'local'" not in text, path


def test_controller_process_refuses_an_unknown_kind_naming_the_key(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text("name: c\nbackends: [{id: cpu, kind: lcoal}]\n")
    result = subprocess.run(
        [sys.executable, "-m", "iris.controller", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert "backends.0.kind: 'lcoal' is not a backend kind" in result.stderr
    assert not (tmp_path / "state").exists()
