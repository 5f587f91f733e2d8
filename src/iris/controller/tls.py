"""The controller's TLS, from its config: the context its port serves with, and how it, its tasks
and its peers' clients call over https.

Built from the config alone, in one place, so the port, the controller's probe of itself, the
federation's peer clients and the endpoint relay to peers all read `tls:` and `peers.*.ca` alike.
Its tasks are told to trust the certificates it serves ($IRIS_CA, as PEM text: a task may run on
another host, under another uid, where no file of the controller's can be read), so a task calling
back (a driver submitting children) checks the controller as any client does. A cluster with `tls:`
presents its own certificate to its peers: a peer whose `tls.client_ca`
asks callers for one sees the cluster's certificate (issued for both ends of a connection), and a
peer that asks for none is sent none.
"""

from __future__ import annotations

import re

from iris.core.config import ClusterConfig
from iris.core.errors import InvalidArgument
from iris.rpc.transport import ClientTls

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ssl


def server_tls_context(config: ClusterConfig) -> ssl.SSLContext | None:
    """The TLS context the controller's port serves with (None without `tls:`); a certificate, key
    or client CA that cannot be read or used is an error naming its key."""
    if config.tls is None:
        return None
    import ssl

    tls = config.tls
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    key, files = "tls.certificate and tls.key", (tls.certificate, tls.key)
    try:
        context.load_cert_chain(tls.certificate, tls.key)
        if tls.client_ca:
            key, files = "tls.client_ca", (tls.client_ca, "")
            context.load_verify_locations(tls.client_ca)
    except (OSError, ssl.SSLError) as exc:
        why = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)
        raise InvalidArgument(
            f"{key} ({', '.join(f for f in files if f)}) cannot be used: {why}; give PEM files the"
            " controller's user can read (a certificate with its chain, its unencrypted private key)"
        ) from None
    if tls.client_ca:
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def self_tls(config: ClusterConfig) -> ClientTls | None:
    """How the controller's own host calls it at its URL over TLS: trusting the certificate it
    serves, and presenting it when callers must present one (None without `tls:`)."""
    if config.tls is None:
        return None
    tls = config.tls
    if tls.client_ca:
        return ClientTls(ca=tls.certificate, certificate=tls.certificate, key=tls.key)
    return ClientTls(ca=tls.certificate)


def peer_tls(config: ClusterConfig) -> dict[str, ClientTls]:
    """Per peer, how its certificate is checked (`peers.<id>.ca`, else the system's store) and the
    certificate this cluster presents to it (its own `tls:` one, when it has one)."""
    tls = config.tls
    return {
        peer_id: ClientTls(ca=peer.ca or "", certificate=tls.certificate if tls else "", key=tls.key if tls else "")
        for peer_id, peer in config.peers.items()
    }


def check_peer_cas(config: ClusterConfig) -> None:
    """Refuses a `peers.<id>.ca` that cannot be read as PEM certificates, naming the key, before the
    controller starts (rather than at its first heartbeat)."""
    for peer_id, peer in config.peers.items():
        if peer.ca:
            try:
                ClientTls(ca=peer.ca).context()
            except InvalidArgument:
                raise InvalidArgument(
                    f"peers.{peer_id}.ca: {peer.ca} cannot be read as PEM certificates; name the file of the CA"
                    " that signed the peer's certificate"
                ) from None


_CERTIFICATE = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----\s*", re.S)


def task_ca(config: ClusterConfig) -> str | None:
    """The certificates the controller serves (its certificate file's, without anything else the
    file holds, a key least of all), as PEM text for its tasks' $IRIS_CA; None without `tls:`."""
    if config.tls is None:
        return None
    try:
        with open(config.tls.certificate) as f:
            text = f.read()
    except OSError as exc:
        raise InvalidArgument(f"tls.certificate ({config.tls.certificate}) cannot be read: {exc.strerror}") from None
    return "".join(_CERTIFICATE.findall(text)) or None
