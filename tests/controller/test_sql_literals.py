"""State names in SQL come from the enums: no string under src/ spells a state as an SQL literal."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import iris
from iris.controller.db.literals import LIVE_TASKS, TERMINAL_JOBS, in_list, quoted
from iris.core.states import ACTIVE_TASK_STATES, JobState, TaskState
from iris.federation.model import Direction, HandoffState

SRC = Path(iris.__file__).parent
WORDS = sorted({s.value for e in (TaskState, JobState, HandoffState, Direction) for s in e}, key=len, reverse=True)
LITERAL = re.compile("'(" + "|".join(WORDS) + ")'")


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def typed_state_literals(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string outside docstrings that spells a state as 'WORD'."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in skip
        and LITERAL.search(node.value)
    ]


def test_no_state_is_typed_as_an_sql_literal_under_src():
    found = [
        f"{path.relative_to(SRC.parent)}:{line}: {text.strip()[:100]}"
        for path in sorted(SRC.rglob("*.py"))
        if not path.name.endswith(("_pb2.py", "_pb2.pyi"))
        for line, text in typed_state_literals(path.read_text())
    ]
    assert not found, (
        "state names typed into SQL; build them from the enums (iris.controller.db.literals):\n" + "\n".join(found)
    )


def test_the_literal_scan_catches_a_typed_state_and_ignores_docstrings():
    planted = '"""Says \'RUNNING\' in a docstring."""\nq = "SELECT 1 FROM jobs WHERE state = \'KILLED\'"\n'
    assert typed_state_literals(planted) == [(2, "SELECT 1 FROM jobs WHERE state = 'KILLED'")]


def test_state_lists_are_built_from_the_enums_in_a_stable_order():
    assert quoted(TaskState.RUNNING) == "'RUNNING'"
    assert LIVE_TASKS == "('ASSIGNED','BUILDING','RUNNING')" == in_list(reversed(sorted(ACTIVE_TASK_STATES)))
    assert TERMINAL_JOBS == "('FAILED','KILLED','SUCCEEDED','UNSCHEDULABLE')"
