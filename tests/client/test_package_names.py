"""`iris.client` loads its public names on first use, yet reads as a package that imported them: each
name imports on its own in a fresh interpreter, `dir()` lists them and the submodules they come from,
and those submodules are attributes of the package after a plain `import iris.client`."""

from __future__ import annotations

import subprocess
import sys

import pytest

import iris.client

PUBLIC = sorted(iris.client.__all__)


def _fresh(code: str) -> str:
    """What `code` prints, run in a new interpreter (nothing of the SDK imported before it)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("name", PUBLIC)
def test_each_public_name_imports_alone_in_a_fresh_interpreter(name):
    assert _fresh(f"from iris.client import {name}; print({name} is not None)") == "True"


def test_dir_lists_the_public_names_and_the_submodules_they_come_from_before_any_is_used():
    listed = _fresh("import iris.client; print(' '.join(dir(iris.client)))").split()
    assert set(PUBLIC) | {"client", "launch"} <= set(listed)
    assert "TYPE_CHECKING" not in listed


def test_the_submodules_are_attributes_of_a_plainly_imported_package():
    code = (
        "import iris.client\n"
        "print(iris.client.client.IrisClient is iris.client.IrisClient,"
        " iris.client.launch.build_launch_request is iris.client.build_launch_request)"
    )
    assert _fresh(code) == "True True"


def test_a_name_it_does_not_have_is_an_attribute_error_and_an_import_error():
    code = (
        "import iris.client\n"
        "print(hasattr(iris.client, 'no_such_name'))\n"
        "try:\n"
        "    from iris.client import no_such_name\n"
        "except ImportError:\n"
        "    print('ImportError')"
    )
    assert _fresh(code).split() == ["False", "ImportError"]
