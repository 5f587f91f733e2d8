"""The `local` backend kind: attempts run as subprocesses on the controller's host."""

from iris.backends.local.backend import LocalBackend
from iris.backends.protocol import BackendContext
from iris.backends.registry import register
from iris.core.config import LocalBackendConfig


def _build(config: LocalBackendConfig, context: BackendContext) -> LocalBackend:
    return LocalBackend(
        config,
        context.state_dir,
        wake=context.wake,
        output_cap=context.output_cap,
        configured=context.backend_ids,
        note=context.note,
        tasks_have_own_uids=context.tasks_have_own_uids,
    )


register("local", LocalBackendConfig, _build)
