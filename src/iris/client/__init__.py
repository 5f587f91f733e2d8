"""The Python SDK: `IrisClient(url)` submits, watches and stops jobs on one controller.

The names below are imported on first use, not with the package: the CLI's lean `job list` and
`job describe` import `iris.client.tokens` and the transport alone, and importing the client here
would bring its request builders and most of `iris.core` with them.
"""

TYPE_CHECKING = False  # typing's own constant costs `import typing`
if TYPE_CHECKING:
    from iris.client.client import DEFAULT_URL, IrisClient, default_url
    from iris.client.launch import build_launch_request, default_user

__all__ = ["DEFAULT_URL", "IrisClient", "build_launch_request", "default_url", "default_user"]
_MODULES = {
    "DEFAULT_URL": "iris.client.client",
    "IrisClient": "iris.client.client",
    "default_url": "iris.client.client",
    "build_launch_request": "iris.client.launch",
    "default_user": "iris.client.launch",
}


def __getattr__(name: str) -> object:
    """A public name, imported now; or a submodule (`iris.client.launch`), as the package's import
    of these names once made every one they come from an attribute of it."""
    import importlib

    module = _MODULES.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
    if not name.startswith("_") and name in _submodules():
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'iris.client' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(({*globals(), *__all__, *_submodules()}) - {"TYPE_CHECKING"})


def _submodules() -> set[str]:
    import pkgutil

    return {m.name for m in pkgutil.iter_modules(__path__)}
