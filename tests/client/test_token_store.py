"""The CLI's per-controller token file: remembered, private, atomic."""

from __future__ import annotations

import json
import stat

import pytest

from iris.client.token_store import TokenStore, default_token_path
from iris.core.errors import InvalidArgument


def test_token_store_put_then_get_returns_token(tmp_path):
    store = TokenStore(tmp_path / ".iris" / "tokens.json")
    store.put("http://127.0.0.1:10000", "tok-a")
    assert store.get("http://127.0.0.1:10000") == "tok-a"
    assert TokenStore(tmp_path / ".iris" / "tokens.json").get("http://127.0.0.1:10000") == "tok-a"


def test_token_store_file_mode_0600_folder_0700(tmp_path):
    store = TokenStore(tmp_path / ".iris" / "tokens.json")
    store.put("http://127.0.0.1:10000", "tok-a")
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.path.parent.stat().st_mode) == 0o700
    assert [p.name for p in store.path.parent.iterdir()] == ["tokens.json"]


def test_token_store_loose_permissions_tightened_on_put(tmp_path):
    store = TokenStore(tmp_path / "tokens.json")
    store.put("http://a:1", "tok-a")
    store.path.chmod(0o644)
    store.put("http://b:1", "tok-b")
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600


def test_token_store_missing_file_or_url_returns_none(tmp_path):
    store = TokenStore(tmp_path / "tokens.json")
    assert store.get("http://127.0.0.1:10000") is None
    store.put("http://127.0.0.1:10000", "tok-a")
    assert store.get("http://127.0.0.1:10001") is None


def test_token_store_one_token_per_controller_replaced_on_put(tmp_path):
    store = TokenStore(tmp_path / "tokens.json")
    store.put("http://marin:10000", "tok-1")
    store.put("http://cw-h100:10001", "tok-2")
    store.put("http://marin:10000", "tok-3")
    assert store.get("http://marin:10000") == "tok-3"
    assert store.get("http://cw-h100:10001") == "tok-2"
    assert json.loads(store.path.read_text())["tokens"] == {
        "http://cw-h100:10001": "tok-2",
        "http://marin:10000": "tok-3",
    }


def test_token_store_url_spellings_share_token(tmp_path):
    store = TokenStore(tmp_path / "tokens.json")
    store.put("HTTP://Marin.Example.org:10000/", "tok")
    assert store.get("http://marin.example.org:10000") == "tok"


def test_token_store_delete_forgets_token(tmp_path):
    store = TokenStore(tmp_path / "tokens.json")
    store.put("http://marin:10000", "tok")
    assert store.delete("http://marin:10000") is True
    assert store.get("http://marin:10000") is None
    assert store.delete("http://marin:10000") is False


def test_token_store_corrupt_file_invalid_argument(tmp_path):
    store = TokenStore(tmp_path / "tokens.json")
    store.path.write_text("{not json")
    with pytest.raises(InvalidArgument, match=r"is not valid JSON.*delete it"):
        store.get("http://marin:10000")


def test_token_store_empty_token_invalid_argument(tmp_path):
    with pytest.raises(InvalidArgument, match=r"empty token"):
        TokenStore(tmp_path / "tokens.json").put("http://marin:10000", "  ")


def test_token_store_default_path_under_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert TokenStore().path == tmp_path / ".iris" / "tokens.json" == default_token_path()
