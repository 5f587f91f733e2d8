"""Authentication and authorization for a cluster: keys, bearer tokens, identities, role rules.

Everything here is plain functions and frozen dataclasses with no global state; the controller
builds one `Authenticator` from its config at start, resolves each request to an `Identity`, and
asks `authorize` (and the job-scoped checks) before acting. The CLI uses `mint_token`; the file
where it keeps tokens is the SDK's (`iris.client.token_store`).
"""

from iris.controller.auth.authenticator import DEFAULT_TRUSTED_CIDRS, Authenticator, parse_cidrs
from iris.controller.auth.identity import ANONYMOUS, LOCAL_ADMIN, RELAYED_HEADER, Identity, Role
from iris.controller.auth.keys import (
    SIGNING_KEY_FILE,
    SigningKey,
    key_id,
    load_or_create_signing_key,
    load_public_key,
    public_key_pem,
)
from iris.controller.auth.policy import (
    CONTROLLER_METHODS,
    READ_METHODS,
    ROLE_METHODS,
    authorize,
    check_handoff,
    check_may_federate,
    check_may_stop,
    check_sync_requester,
    is_allowed,
    may_stop,
    submitter_allowed,
)
from iris.controller.auth.tokens import (
    PEER_TOKEN_TTL_S,
    mint_peer_token,
    mint_token,
    unverified_issuer,
    verify_token,
)

__all__ = [
    "CONTROLLER_METHODS",
    "DEFAULT_TRUSTED_CIDRS",
    "ANONYMOUS",
    "LOCAL_ADMIN",
    "PEER_TOKEN_TTL_S",
    "RELAYED_HEADER",
    "READ_METHODS",
    "ROLE_METHODS",
    "SIGNING_KEY_FILE",
    "Authenticator",
    "Identity",
    "Role",
    "SigningKey",
    "authorize",
    "check_handoff",
    "check_may_federate",
    "check_may_stop",
    "check_sync_requester",
    "is_allowed",
    "key_id",
    "load_or_create_signing_key",
    "load_public_key",
    "may_stop",
    "mint_peer_token",
    "mint_token",
    "parse_cidrs",
    "public_key_pem",
    "submitter_allowed",
    "unverified_issuer",
    "verify_token",
]
