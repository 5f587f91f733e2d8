"""The loader's cache of parsed job configs is trimmed by the tick while an explain call, on an API
thread and without the load lock, may add to it: the trim must not break on that insert."""

from __future__ import annotations

from iris.controller.db.database import Database
from iris.controller.state.snapshot import SnapshotLoader


class _GrowsWhileWalked(dict):
    """A cache that gains an entry part way through a walk of its items, as it does when an explain
    call caches a config between two steps of the tick's walk."""

    def items(self):
        for n, item in enumerate(super().items()):
            if n == 10:
                self["/bob/explained"] = (1, None)
            yield item


def test_trimming_the_config_cache_survives_an_insert_from_another_thread(tmp_path):
    loader = SnapshotLoader(Database(tmp_path / "controller.db"))
    cache = _GrowsWhileWalked({f"/alice/done-{i}": (i, None) for i in range(1200)})
    cache["/alice/live"] = (1, None)
    loader._configs = cache
    loader._forget_finished({"/alice/live"})
    assert set(loader._configs) == {"/alice/live"}
