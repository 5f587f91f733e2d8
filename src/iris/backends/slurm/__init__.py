"""The `slurm` backend kind: each attempt is one batch job in a Slurm partition."""

from iris.backends.protocol import BackendContext
from iris.backends.registry import register
from iris.backends.slurm.backend import SlurmBackend
from iris.core.config import SlurmBackendConfig


def _build(config: SlurmBackendConfig, context: BackendContext) -> SlurmBackend:
    return SlurmBackend(
        config, context.cluster, context.state_dir, context.wake, context.output_cap, context.tasks_have_own_uids
    )


register("slurm", SlurmBackendConfig, _build)
