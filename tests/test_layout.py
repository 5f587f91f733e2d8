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
