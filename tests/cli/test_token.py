"""`iris token create`, `iris cluster public-key` and the token a CLI sends, against real controllers.

A tokenless call from loopback is local_admin, so the proof that a token was sent is who owns the
job it submitted: alice when her token went out, local_admin when none did.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from iris.client.token_store import TokenStore, default_token_path
from iris.client.tokens import token_file, token_for
from iris.controller.auth import (
    SigningKey,
    load_or_create_signing_key,
    mint_token,
    public_key_pem,
    verify_token,
)
from tests.conftest import free_port


def iris(*args: str, home: Path, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """`iris ARGS` as a subprocess with its own HOME (so its own token file) and no token in the environment."""
    base = {k: v for k, v in os.environ.items() if k not in ("IRIS_TOKEN", "IRIS_CONTROLLER")}
    return subprocess.run(
        [sys.executable, "-m", "iris.cli.main", *args],
        env={**base, "HOME": str(home), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def write_config(tmp_path: Path, **extra) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "tok",
                "listen": f"127.0.0.1:{free_port()}",
                "state_dir": "state",
                "backends": [{"id": "cpu"}],
                **extra,
            }
        )
    )
    return path


def owner_of_new_job(ctl, name: str, *args: str, home: Path, env: dict | None = None) -> str:
    """Submits `true` as alice through the CLI with `args` before the subcommand; the owner the controller recorded."""
    run = iris(
        "--controller",
        ctl.url,
        *args,
        "job",
        "run",
        "--user",
        "alice",
        "--job-name",
        name,
        "--",
        "true",
        home=home,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    described = iris("--controller", ctl.url, "-o", "json", "job", "describe", f"/alice/{name}", home=home)
    assert described.returncode == 0, described.stderr
    return json.loads(described.stdout)["job"]["owner"]


# -- minting, without a controller -------------------------------------------------------------


def test_token_create_mints_with_the_state_dir_key_creating_it(tmp_path):
    config = write_config(tmp_path)
    result = iris("token", "create", "--config", str(config), "--user", "alice", home=tmp_path)
    assert result.returncode == 0, result.stderr
    key = load_or_create_signing_key(None, tmp_path / "state")
    identity = verify_token(result.stdout.strip(), key, "tok")
    assert (identity.principal, identity.role.value) == ("alice", "user")
    assert (tmp_path / "state" / "signing_key.pem").stat().st_mode & 0o777 == 0o600


def test_token_create_json_reports_user_role_and_expiry(tmp_path):
    config = write_config(tmp_path)
    before_ms = time.time() * 1000
    result = iris(
        "-o",
        "json",
        "token",
        "create",
        "--config",
        str(config),
        "--user",
        "bob",
        "--role",
        "dashboard",
        "--ttl",
        "2h",
        home=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["user"], doc["role"], doc["cluster"], doc["saved"]) == ("bob", "dashboard", "tok", False)
    assert before_ms + 2 * 3600_000 - 2000 <= doc["expires_ms"] <= time.time() * 1000 + 2 * 3600_000 + 2000
    identity = verify_token(doc["token"], load_or_create_signing_key(None, tmp_path / "state"), "tok")
    assert identity.role.value == "dashboard" and doc["expires_ms"] % 1000 == 0


def test_token_create_uses_the_configured_signing_key(tmp_path):
    key = load_or_create_signing_key(None, tmp_path / "keys")
    config = write_config(tmp_path, auth={"signing_key": "keys/signing_key.pem"})
    result = iris("--config", str(config), "token", "create", "--user", "alice", home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert verify_token(result.stdout.strip(), key, "tok").principal == "alice"
    assert not (tmp_path / "state" / "signing_key.pem").exists()
    public = iris("cluster", "public-key", "--config", str(config), home=tmp_path)
    assert public.stdout == public_key_pem(key)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--role", "root"), "'root' is not one of 'user', 'admin', 'dashboard', 'worker'"),
        (("--role", "federation-peer"), "'federation-peer' is not one of"),
        (("--ttl", "soon"), "duration 'soon' is not understood"),
        (("--ttl", "0"), "'0' is not a positive duration"),
        (("--ttl", "-5m"), "--ttl"),
        (
            ("--ttl", "400d"),
            "--ttl 400d is longer than cluster tok allows for user tokens (30d, auth.max_token_lifetime",
        ),
    ],
)
def test_token_create_bad_role_or_ttl_exits_3_naming_the_flag(tmp_path, args, message):
    config = write_config(tmp_path)
    result = iris("token", "create", "--config", str(config), "--user", "alice", *args, home=tmp_path)
    assert result.returncode == 3
    assert message in result.stderr and result.stdout == ""
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("user", ["../x", "alice smith", "-alice", "al/ice", "a" * 257])
def test_token_create_refuses_a_user_no_job_could_be_filed_for(tmp_path, user):
    config = write_config(tmp_path)
    result = iris("token", "create", "--config", str(config), "--user", user, home=tmp_path)
    assert result.returncode == 3 and result.stdout == ""
    assert "is not a name a token can be minted for" in result.stderr
    assert "Traceback" not in result.stderr


def test_token_create_takes_an_address_as_its_user(tmp_path):
    config = write_config(tmp_path)
    result = iris("token", "create", "--config", str(config), "--user", "alice.b+ml@example.org", home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(".") == 2


def test_token_create_needs_a_user_and_a_cluster(tmp_path):
    config = write_config(tmp_path)
    no_user = iris("token", "create", "--config", str(config), home=tmp_path)
    assert no_user.returncode == 3 and "--user" in no_user.stderr
    empty = iris("token", "create", "--config", str(config), "--user", " ", home=tmp_path)
    assert empty.returncode == 3 and "a token needs a subject" in empty.stderr
    no_config = iris("token", "create", "--user", "alice", home=tmp_path)
    assert no_config.returncode == 3 and "--config cluster.yaml" in no_config.stderr


def test_token_create_save_stores_it_for_the_cluster_url(tmp_path):
    config = write_config(tmp_path)
    url = yaml.safe_load(config.read_text())["listen"]
    result = iris("token", "create", "--config", str(config), "--user", "alice", "--save", home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"saved for http://{url}" in result.stderr
    assert TokenStore(tmp_path / ".iris" / "tokens.json").get(f"http://{url}") == result.stdout.strip()


def test_public_key_is_created_once_and_printed_as_pem(tmp_path):
    config = write_config(tmp_path)
    first = iris("cluster", "public-key", "--config", str(config), home=tmp_path)
    again = iris("-o", "json", "cluster", "public-key", "--config", str(config), home=tmp_path)
    assert first.returncode == 0 and first.stdout.startswith("-----BEGIN PUBLIC KEY-----")
    doc = json.loads(again.stdout)
    assert doc["public_key"] == first.stdout == public_key_pem(load_or_create_signing_key(None, tmp_path / "state"))
    assert doc["cluster"] == "tok" and len(doc["key_id"]) == 16


# -- which token a client sends ------------------------------------------------------------------


def test_token_file_is_the_auth_package_default(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert token_file() == default_token_path()


def test_token_for_prefers_flag_then_environment_then_store(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("IRIS_TOKEN", raising=False)
    url = "http://127.0.0.1:1234"
    assert token_for(url) is None and not token_file().exists()
    TokenStore(token_file()).put(url + "/", "stored")
    assert token_for(url) == "stored"
    assert token_for("http://127.0.0.1:9999") is None
    monkeypatch.setenv("IRIS_TOKEN", "from-env")
    assert token_for(url) == "from-env"
    assert token_for(url, "from-flag") == "from-flag"


# -- against a real controller -------------------------------------------------------------------


def test_token_minted_by_the_cli_is_sent_from_flag_env_and_store(controller, tmp_path):
    cfg = str(controller.config_path)
    minted = iris("token", "create", "--config", cfg, "--user", "alice", home=tmp_path)
    assert minted.returncode == 0, minted.stderr
    token = minted.stdout.strip()
    assert owner_of_new_job(controller, "no-token", home=tmp_path) == "local_admin"
    assert owner_of_new_job(controller, "by-flag", "--token", token, home=tmp_path) == "alice"
    assert owner_of_new_job(controller, "by-env", home=tmp_path, env={"IRIS_TOKEN": token}) == "alice"
    saved = iris("token", "create", "--config", cfg, "--user", "alice", "--save", home=tmp_path)
    assert saved.returncode == 0, saved.stderr
    assert owner_of_new_job(controller, "by-store", home=tmp_path) == "alice"
    # `--config` names the same controller URL as `--controller`, so the stored token goes with it too.
    run = iris("--config", cfg, "job", "run", "--user", "alice", "--job-name", "by-config", "--", "true", home=tmp_path)
    assert run.returncode == 0, run.stderr
    rows = iris(
        "--controller",
        controller.url,
        "-o",
        "json",
        "query",
        "SELECT job_id, owner FROM jobs ORDER BY job_id",
        home=tmp_path,
    )
    assert json.loads(rows.stdout)["rows"] == [
        ["/alice/by-config", "alice"],
        ["/alice/by-env", "alice"],
        ["/alice/by-flag", "alice"],
        ["/alice/by-store", "alice"],
        ["/alice/no-token", "local_admin"],
    ]


def test_stored_token_is_overridden_by_flag_and_env(controller, tmp_path):
    key = load_or_create_signing_key(None, controller.state_dir)
    bob = mint_token(key, controller.name, "bob", "user", 3600)
    alice = mint_token(key, controller.name, "alice", "user", 3600)
    TokenStore(tmp_path / ".iris" / "tokens.json").put(controller.url, bob)
    assert owner_of_new_job(controller, "flag-wins", "--token", alice, home=tmp_path) == "alice"
    assert owner_of_new_job(controller, "env-wins", home=tmp_path, env={"IRIS_TOKEN": alice}) == "alice"
    # With only bob's stored token, bob may not submit as alice: the stored token was sent.
    refused = iris("--controller", controller.url, "job", "run", "--user", "alice", "--", "true", home=tmp_path)
    assert refused.returncode == 2 and "in the namespace of user 'alice'" in refused.stderr


def test_token_of_another_cluster_is_refused_with_a_clear_message(controller, tmp_path):
    foreign = mint_token(SigningKey.generate(), "elsewhere", "alice", "user", 3600)
    result = iris("--controller", controller.url, "--token", foreign, "job", "list", home=tmp_path)
    assert result.returncode == 3
    assert "foreign token" in result.stderr and "elsewhere" in result.stderr


def test_cluster_status_with_config_sends_the_stored_token(controller, tmp_path):
    key = load_or_create_signing_key(None, controller.state_dir)
    TokenStore(tmp_path / ".iris" / "tokens.json").put(controller.url, mint_token(key, "other", "x", "user", 60))
    # A token minted under another issuer name is refused: proof that `cluster status --config` sent it.
    result = iris("cluster", "status", "--config", str(controller.config_path), home=tmp_path)
    assert result.returncode == 3 and "foreign token" in result.stderr


def test_job_run_with_a_user_token_submits_as_the_tokens_user(controller, tmp_path):
    token = iris(
        "token", "create", "--config", str(controller.config_path), "--user", "alice", home=tmp_path
    ).stdout.strip()
    run = iris(
        "--controller",
        controller.url,
        "--token",
        token,
        "job",
        "run",
        "--job-name",
        "mine",
        "--",
        "true",
        home=tmp_path,
        env={"USER": "bob"},
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0] == "/alice/mine"
    other = iris(
        "--controller", controller.url, "--token", token, "job", "run", "--user", "bob", "--", "true", home=tmp_path
    )
    assert other.returncode == 2 and "in the namespace of user 'bob'" in other.stderr  # refused by the controller


def test_token_revoke_of_what_is_no_token_or_token_id_exits_3_and_revokes_nothing(controller, tmp_path):
    for bad in ("garbage", "0123456789abcdef0123456789abcdeX", "a" * 31, "eyJ.notatoken"):
        result = iris("--controller", controller.url, "token", "revoke", bad, home=tmp_path)
        assert result.returncode == 3, result.stdout + result.stderr
        assert "token id" in result.stderr and "revoked token" not in result.stdout
    rows = iris("--controller", controller.url, "-o", "json", "query", "SELECT jti FROM revoked_tokens", home=tmp_path)
    assert rows.returncode == 0 and json.loads(rows.stdout)["rows"] == []


def test_token_revoke_by_the_id_create_prints_refuses_that_token(controller, tmp_path):
    made = iris(
        "token", "create", "--config", str(controller.config_path), "--user", "alice", "-o", "json", home=tmp_path
    )
    doc = json.loads(made.stdout)
    revoked = iris("--controller", controller.url, "token", "revoke", doc["token_id"].upper(), home=tmp_path)
    assert revoked.returncode == 0 and doc["token_id"] in revoked.stdout, revoked.stderr
    refused = iris("--controller", controller.url, "--token", doc["token"], "job", "list", home=tmp_path)
    assert refused.returncode == 3 and "revoked" in refused.stderr


def test_an_empty_token_means_none_and_forget_removes_the_saved_one(controller, tmp_path):
    key = load_or_create_signing_key(None, controller.state_dir)
    TokenStore(tmp_path / ".iris" / "tokens.json").put(
        controller.url, mint_token(key, controller.name, "alice", "user", 600)
    )
    assert owner_of_new_job(controller, "stored", home=tmp_path) == "alice"
    # Given but empty, from the flag or the environment: no token at all, not the stored one.
    assert owner_of_new_job(controller, "empty-flag", "--token", "", home=tmp_path) == "local_admin"
    assert owner_of_new_job(controller, "empty-env", home=tmp_path, env={"IRIS_TOKEN": ""}) == "local_admin"
    forgot = iris("--controller", controller.url, "token", "forget", home=tmp_path)
    assert forgot.returncode == 0, forgot.stderr
    assert f"forgot the token saved for {controller.url}" in forgot.stdout
    assert TokenStore(tmp_path / ".iris" / "tokens.json").get(controller.url) is None
    assert owner_of_new_job(controller, "forgotten", home=tmp_path) == "local_admin"
    again = iris("-o", "json", "token", "forget", controller.url, home=tmp_path)
    assert again.returncode == 0 and json.loads(again.stdout)["forgotten"] is False
    bad = iris("token", "forget", "not a url", home=tmp_path)
    assert bad.returncode == 3 and "is not a controller URL" in bad.stderr


def test_a_refused_saved_token_names_the_file_it_came_from(controller, tmp_path):
    TokenStore(tmp_path / ".iris" / "tokens.json").put(
        controller.url, mint_token(SigningKey.generate(), "elsewhere", "alice", "user", 600)
    )
    refused = iris("--controller", controller.url, "job", "list", home=tmp_path)
    assert refused.returncode == 3
    assert str(tmp_path / ".iris" / "tokens.json") in refused.stderr
    assert f"iris token forget {controller.url}" in refused.stderr
    # A token the person typed is theirs to fix: no file is named.
    typed = iris(
        "--controller",
        controller.url,
        "--token",
        mint_token(SigningKey.generate(), "x", "a", "user", 60),
        "job",
        "list",
        home=tmp_path,
    )
    assert typed.returncode == 3 and "tokens.json" not in typed.stderr
