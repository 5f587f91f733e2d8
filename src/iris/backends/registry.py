"""Builds a backend from its config: one table from `kind` to (config model, factory).

The controller builds every backend through `build` and never names a concrete kind, so adding a
kind touches no controller code. A kind's package `iris.backends.<kind>` makes one `register`
call when imported; `build` imports that package on first use, which keeps a cluster that runs
only local backends from importing (say) the Slurm client at all.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from iris.backends.protocol import Backend, BackendContext
from iris.core.config import BACKEND_CONFIG_MODELS, BackendModel
from iris.core.errors import InvalidArgument

Factory = Callable[[Any, BackendContext], Backend]


@dataclass(frozen=True, slots=True)
class BackendKind:
    kind: str
    config_model: type[BackendModel]
    factory: Factory


_KINDS: dict[str, BackendKind] = {}


def register(kind: str, config_model: type[BackendModel], factory: Factory) -> None:
    """Declares how to build backends of `kind`; `config_model` must be that kind's config model
    in `iris.core.config.BackendConfig`."""
    declared = BACKEND_CONFIG_MODELS.get(kind)
    if declared is not config_model:
        raise TypeError(
            f"backend kind {kind!r} registers {config_model.__name__}, but iris.core.config declares "
            f"{declared.__name__ if declared else 'no model'} for it; add the model to BackendConfig"
        )
    entry = BackendKind(kind, config_model, factory)
    existing = _KINDS.get(kind)
    if existing is not None and existing != entry:
        raise TypeError(f"backend kind {kind!r} is registered twice")
    _KINDS[kind] = entry


def lookup(kind: str) -> BackendKind:
    """The registration of `kind`, importing its package `iris.backends.<kind>` on first use."""
    if kind not in _KINDS and kind in BACKEND_CONFIG_MODELS:
        importlib.import_module(f"{__package__}.{kind}")
    entry = _KINDS.get(kind)
    if entry is None:
        known = ", ".join(sorted(BACKEND_CONFIG_MODELS))
        raise InvalidArgument(f"backend kind {kind!r} is not known; use one of: {known}")
    return entry


def build(config: BackendModel, context: BackendContext) -> Backend:
    """A running backend for one `backends:` entry of the cluster config."""
    entry = lookup(config.kind)
    if not isinstance(config, entry.config_model):
        raise TypeError(f"backend {config.id!r} of kind {config.kind!r} has a {type(config).__name__} config")
    return entry.factory(config, context)
