"""`iris token create|revoke|forget`: mint a bearer token for one of a cluster's users, with the cluster's own key.

Minting needs the cluster's private key, not a running controller: whoever holds the config (and so
the key file) vouches for the user, exactly as the controller would. The key is found the way the
controller finds it (`auth.signing_key`, else `<state_dir>/signing_key.pem`, created when missing),
through the same function, so a token minted before the first start still verifies after it, and
`iris cluster public-key` prints the half that peers need before the cluster has ever run.

The roles a person or a host holds can be minted here (user, admin, dashboard, and worker for
`iris worker start` daemons); federation-peer tokens are minted by the clusters themselves. A
worker token names the one worker it registers (`--worker NAME`): whoever steals it from that host
cannot join the pool under another name. One minted without `--worker` is bound by the controller
to the first name it registers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from iris.cli import commands as cmd
from iris.cli.cluster import config_options, resolve_config
from iris.cli.main import EXIT_OK, CliContext, output_option
from iris.cli.values import positive_duration

PERSON_ROLES = ("user", "admin", "dashboard", "worker")
DEFAULT_TTL = "30d"


@dataclass(frozen=True)
class IssuedToken:
    """A token and what it says: who, in which role, until when (ms since the epoch)."""

    token: str
    user: str
    role: str
    expires_ms: int
    token_id: str = ""
    worker: str = ""  # the worker name a worker token is bound to ("" for none)


def cluster_signing_key(config):  # (ClusterConfig) -> SigningKey
    """The cluster's signing key, found (or created) exactly as its controller does."""
    from iris.controller.auth import load_or_create_signing_key

    return load_or_create_signing_key(config.auth.signing_key, config.state_path)


def _ttl_text(seconds: float) -> str:
    """A lifetime in the largest unit that states it exactly, as --ttl takes it (30d, 12h, 90s)."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def issue_token(config, user: str, role: str, ttl_s: float, worker: str = "") -> IssuedToken:
    """Mints a token for `user` in `role`, valid `ttl_s` seconds, signed by the cluster of `config`;
    a worker token bound to the worker name `worker` when one is given.

    A ttl longer than the cluster allows for the role (`auth.max_token_lifetime`) is refused here,
    since the controller would refuse the token anyway.
    """
    import jwt

    from iris.controller.auth import mint_token
    from iris.core.errors import InvalidArgument
    from iris.core.names import validate_principal, validate_worker_name

    if user:  # an empty one gets mint_token's own message
        validate_principal(user)
    if worker:
        if role != "worker":
            raise InvalidArgument(f"--worker names the worker a worker token registers; pass --role worker, not {role}")
        validate_worker_name(worker)
    longest = config.auth.token_lifetime(role)
    if ttl_s > longest:
        raise InvalidArgument(
            f"--ttl {_ttl_text(ttl_s)} is longer than cluster {config.name} allows for {role} tokens "
            f"({_ttl_text(longest)}, auth.max_token_lifetime.{role}); pass a shorter --ttl"
        )
    token = mint_token(cluster_signing_key(config), config.name, user, role, ttl_s, worker=worker or None)
    claims = jwt.decode(token, options={"verify_signature": False})
    return IssuedToken(
        token=token,
        user=user,
        role=claims["role"],
        expires_ms=int(claims["exp"]) * 1000,
        token_id=claims["jti"],
        worker=worker,
    )


@cmd.group()
def token() -> None:
    """Mint, revoke and forget bearer tokens for a cluster's users."""


@token.command("create")
@config_options
@cmd.option("--user", required=True, help="The user the token identifies; jobs submitted with it are theirs.")
@cmd.option(
    "--role",
    type=cmd.Choice(PERSON_ROLES),
    default="user",
    show_default=True,
    help="user: runs and stops own jobs; admin: everything; dashboard: read-only; "
    "worker: joins a workers backend (`iris worker start`) and nothing else.",
)
@cmd.option(
    "--ttl",
    default=DEFAULT_TTL,
    show_default=True,
    callback=positive_duration,
    metavar="DURATION",
    help="How long the token is valid, e.g. 12h, 30d (controllers allow 30 s of clock skew past it).",
)
@cmd.option(
    "--worker",
    default="",
    metavar="NAME",
    help="With --role worker: the one worker name the token registers (`iris worker start --name NAME`); "
    "without it the token is bound to the first name it registers.",
)
@cmd.option("--save", is_flag=True, help="Remember it for this cluster's URL: later commands send it by themselves.")
@output_option
@cmd.pass_obj
def create(
    obj: CliContext,
    config_path: str | None,
    local: bool,
    port: int | None,
    user: str,
    role: str,
    ttl: float,
    worker: str,
    save: bool,
) -> int:
    """Mints a token for USER signed with the cluster's key and prints it.

    `export IRIS_TOKEN=$(iris token create --config cluster.yaml --user alice)`, or `--save` to keep
    it in ~/.iris/tokens.json for the cluster's URL, which every later command sends by itself.
    A worker daemon's token: `--role worker --worker HOST`, one per worker host.
    """
    from iris.client.tokens import token_file

    config, _ = resolve_config(obj, config_path, local, port)
    issued = issue_token(config, user.strip(), role, ttl, worker.strip())
    if save:
        from iris.client.token_store import TokenStore

        TokenStore(token_file()).put(config.url, issued.token)
    if obj.json:
        obj.emit(
            {
                "token": issued.token,
                "user": issued.user,
                "role": issued.role,
                "expires_ms": issued.expires_ms,
                "token_id": issued.token_id,
                "worker": issued.worker or None,
                "cluster": config.name,
                "url": config.url,
                "saved": save,
            }
        )
        return EXIT_OK
    cmd.echo(issued.token)
    if save:
        cmd.echo(f"saved for {config.url} in {token_file()}; iris commands for that controller now send it", err=True)
    return EXIT_OK


_TOKEN_ID = re.compile(r"[0-9a-fA-F]{32}")


def revocation(value: str) -> tuple[str, str, int]:
    """(token id, subject, expiry ms) from a whole token or a bare token id."""
    import jwt

    value = value.strip()
    if value.count(".") != 2:
        # A bare id: the 32 hex digits every token is minted with. Anything else is a typo or a cut
        # token, and revoking it would say "revoked" while the real token still works.
        if not _TOKEN_ID.fullmatch(value):
            raise cmd.BadParameter(
                f"{value[:40]!r} is neither a token nor a token id (32 hex digits, the token_id "
                "`iris token create -o json` prints); pass the whole token or its id",
                param_hint="TOKEN",
            )
        return value.lower(), "", 0
    try:
        claims = jwt.decode(value, options={"verify_signature": False})
    except jwt.InvalidTokenError as exc:
        raise cmd.BadParameter(
            f"not a token ({exc}); pass the whole token or its token id (jti)", param_hint="TOKEN"
        ) from None
    if not claims.get("jti"):
        raise cmd.BadParameter("this token has no id (jti); mint tokens with this version of iris", param_hint="TOKEN")
    exp = claims.get("exp")
    return str(claims["jti"]), str(claims.get("sub", "")), int(exp) * 1000 if isinstance(exp, int | float) else 0


@token.command("revoke")
@cmd.argument("value", metavar="TOKEN")
@output_option
@cmd.pass_obj
def revoke(obj: CliContext, value: str) -> int:
    """Revokes TOKEN (the token itself, or its id as `token create -o json` prints it).

    The controller refuses it from its very next call, and after every restart. Needs an admin:
    run it on the controller's host, or with an admin token.
    """
    from iris.rpc import controller_pb2 as pb

    token_id, subject, expires_ms = revocation(value)
    reply = obj.client().call(
        "RevokeToken", pb.RevokeTokenRequest(token_id=token_id, subject=subject, expires_ms=expires_ms)
    )
    if obj.json:
        obj.emit({"token_id": reply.token_id, "newly_revoked": reply.newly_revoked})
        return EXIT_OK
    already = "" if reply.newly_revoked else " (it was already revoked)"
    cmd.echo(f"revoked token {reply.token_id}{already}")
    return EXIT_OK


@token.command("forget")
@cmd.argument("url", metavar="[URL]", required=False)
@output_option
@cmd.pass_obj
def forget(obj: CliContext, url: str | None) -> int:
    """Removes the token saved for URL (default: the controller this command would call) from
    ~/.iris/tokens.json, so later commands to it send no token unless given one.

    The token itself stays valid; `iris token revoke` ends it on the cluster.
    """
    from iris.client.client import default_url
    from iris.client.token_store import TokenStore
    from iris.client.tokens import token_file

    if url is not None and not re.match(r"^https?://[^/\s]+", url.strip()):
        raise cmd.BadParameter(f"{url!r} is not a controller URL (http://HOST:PORT)", param_hint="URL")
    target = url.strip() if url is not None else (obj.controller_url() or default_url())
    path = token_file()
    forgotten = TokenStore(path).delete(target) if path.exists() else False
    if obj.json:
        obj.emit({"url": target, "file": str(path), "forgotten": forgotten})
    elif forgotten:
        cmd.echo(f"forgot the token saved for {target} in {path}")
    else:
        cmd.echo(f"no token was saved for {target} in {path}; nothing to forget")
    return EXIT_OK
