"""The `workers` backend kind: `iris worker start` daemons on other hosts join a pool over the API."""

from iris.backends.protocol import Backend, BackendContext
from iris.backends.registry import register
from iris.backends.workers.backend import WorkersBackend
from iris.core.config import WorkersBackendConfig


def _build(config: WorkersBackendConfig, context: BackendContext) -> Backend:
    return WorkersBackend(config, context)


register("workers", WorkersBackendConfig, _build)
