"""The source tree's shape: folders small enough to read, and no two modules of one folder whose
names a reader could confuse (`submit.py` beside `submits.py`)."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "iris"
MAX_MODULES = 13  # "about 12": past that a folder wants splitting by what its modules hold
GENERATED = {"controller_pb2", "controller_connect"}


def _one_edit_apart(a: str, b: str) -> bool:
    """Whether `b` is `a` with one letter added, removed or changed."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b)) == 1
    short, long = sorted((a, b), key=len)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def _folders() -> dict[Path, list[str]]:
    folders: dict[Path, list[str]] = {}
    for path in SRC.rglob("*.py"):
        if path.stem in ("__init__", "__main__") or path.stem in GENERATED:
            continue
        folders.setdefault(path.parent, []).append(path.stem)
    return folders


def test_layout_controller_folders_hold_at_most_about_twelve_modules():
    controller = SRC / "controller"
    crowded = {
        str(d.relative_to(SRC)): len(m)
        for d, m in _folders().items()
        if d.is_relative_to(controller) and len(m) > MAX_MODULES
    }
    assert not crowded, f"split these folders by what their modules hold: {crowded}"


def test_layout_no_two_module_names_in_a_folder_differ_by_one_letter():
    close = [
        f"{d.relative_to(SRC)}: {a}.py / {b}.py"
        for d, names in _folders().items()
        for i, a in enumerate(sorted(names))
        for b in sorted(names)[i + 1 :]
        if _one_edit_apart(a, b)
    ]
    assert not close, close


def test_layout_check_sees_a_one_letter_pair():
    assert _one_edit_apart("submit", "submits") and _one_edit_apart("tick", "tack")
    assert not _one_edit_apart("jobs", "job_spec") and not _one_edit_apart("reads", "reads")


def _private_imports(source: str) -> list[str]:
    """Imports in `source` of a module or name that its library keeps private (a leading `_`),
    outside iris itself; dunders such as `__version__` are public."""
    import ast

    def private(name: str) -> bool:
        return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if any(private(p) for p in a.name.split("."))]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module != "__future__":
            module = node.module or ""
            if any(private(p) for p in module.split(".")):
                found.append(module)
            elif module.split(".")[0] != "iris":
                found += [f"{module}.{a.name}" for a in node.names if private(a.name)]
    return found


def test_layout_nothing_imports_a_private_module_or_name_of_another_library():
    """A library's `_`-prefixed modules and names change without notice (connectrpc's `_protocol`,
    CPython's `_socket`): src/ uses what each library documents."""
    found = {
        f"{path.relative_to(SRC)}: {name}"
        for path in SRC.rglob("*.py")
        if path.stem not in GENERATED
        for name in _private_imports(path.read_text())
    }
    assert not found, sorted(found)


def test_layout_private_import_scan_sees_each_spelling():
    planted = "import _thread\nfrom connectrpc._shared import x\nfrom json import _private\nimport a._b as c\n"
    assert _private_imports(planted) == ["_thread", "connectrpc._shared", "json._private", "a._b"]
    assert _private_imports("from iris import __version__\nfrom iris.x import _y\nimport json.encoder\n") == []
