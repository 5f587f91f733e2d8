"""The database layer: migrations are re-runnable; write transactions are atomic."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from iris.controller.db.database import Database
from iris.controller.db.schema import MIGRATIONS, migrate


def test_migrations_rerun_safely_and_record_each_version(tmp_path):
    db = Database(tmp_path / "c.db")
    assert migrate(db.engine) == []  # already applied by Database()
    with db.read() as conn:
        versions = [r[0] for r in conn.execute(text("SELECT version FROM schema_migrations ORDER BY version"))]
        mode = conn.execute(text("PRAGMA journal_mode")).scalar()
    assert versions == [m[0] for m in MIGRATIONS]
    assert mode == "wal"
    db.close()
    assert migrate(Database(tmp_path / "c.db").engine) == []


def test_a_failed_write_transaction_leaves_nothing_behind(tmp_path):
    db = Database(tmp_path / "c.db")
    with pytest.raises(RuntimeError):
        with db.write() as conn:
            conn.execute(text("INSERT INTO bundles (content_id, size, created_ms) VALUES ('x', 1, 1)"))
            raise RuntimeError("crash mid-transaction")
    with db.read() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM bundles")).scalar() == 0
