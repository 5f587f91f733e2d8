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


def test_changelog_pruning_keeps_the_newest_window(tmp_path):
    from iris.controller.db.federation import changes_since, prune_changelog

    db = Database(tmp_path / "c.db")
    with db.write() as conn:
        conn.execute(
            text(
                "INSERT INTO federation_changelog (job_id, requester, task_index, tombstone, ts_ms) VALUES ('/a/j', 'marin', 0, 0, 1)"
            ),
            [{}] * 10,
        )
        prune_changelog(conn, keep=3)
        seqs = [r[0] for r in conn.execute(text("SELECT seq FROM federation_changelog ORDER BY seq"))]
        assert seqs == [8, 9, 10]
        # a cursor older than the window gets a full resync; one inside it gets the changes since
        assert changes_since(conn, "marin", 2)[3] is True
        assert changes_since(conn, "marin", 8) == (["/a/j"], [], 10, False)
