"""`tls:` and `peers.*.ca` in a cluster config: parsed with paths relative to the file, and
certificates that cannot be used refused before the controller starts, naming the key."""

from __future__ import annotations

import ssl

import pytest
import yaml

from iris.controller.tls import check_peer_cas, peer_tls, self_tls, server_tls_context, task_ca
from iris.core.config import load_config, parse_config
from iris.core.errors import InvalidArgument
from iris.rpc.transport import ClientTls
from iris.testing.tls import Authority

BASE = {"name": "lab", "backends": [{"id": "cpu", "kind": "local"}]}


@pytest.fixture(scope="module")
def ca(tmp_path_factory) -> Authority:
    return Authority(tmp_path_factory.mktemp("ca"))


def test_tls_config_paths_are_relative_to_the_file_and_the_url_is_https(tmp_path):
    (tmp_path / "cluster.yaml").write_text(
        yaml.safe_dump(
            {
                **BASE,
                "listen": "10.0.0.5:10443",
                "tls": {"certificate": "tls/server.pem", "key": "tls/server.key", "client_ca": "tls/ca.pem"},
                "peers": {"cw": {"address": "https://cw.lab:10443", "ca": "tls/cw-ca.pem"}},
            }
        )
    )
    config = load_config(tmp_path / "cluster.yaml")
    assert config.url == "https://10.0.0.5:10443"
    assert config.tls is not None and config.tls.certificate == str(tmp_path / "tls/server.pem")
    assert config.tls.client_ca == str(tmp_path / "tls/ca.pem")
    assert config.peers["cw"].ca == str(tmp_path / "tls/cw-ca.pem")
    assert peer_tls(config)["cw"].ca == str(tmp_path / "tls/cw-ca.pem")
    assert peer_tls(config)["cw"].certificate == config.tls.certificate  # presented to a peer that asks


def test_tls_config_an_http_public_url_beside_tls_is_refused():
    with pytest.raises(InvalidArgument, match="must start with https://"):
        parse_config({**BASE, "public_url": "http://lab:1", "tls": {"certificate": "c.pem", "key": "k.pem"}})


def test_tls_config_listening_on_every_address_needs_a_public_url():
    tls = {"certificate": "c.pem", "key": "k.pem"}
    with pytest.raises(InvalidArgument, match="public_url: with tls and listen '0.0.0.0:10443'"):
        parse_config({**BASE, "listen": "0.0.0.0:10443", "tls": tls})
    named = parse_config({**BASE, "listen": "0.0.0.0:10443", "public_url": "https://lab:10443", "tls": tls})
    assert named.url == "https://lab:10443"


def test_tls_config_an_unknown_key_is_refused_with_a_hint():
    with pytest.raises(InvalidArgument, match="tls.cert: is not a known key"):
        parse_config({**BASE, "tls": {"cert": "c.pem", "certificate": "c.pem", "key": "k.pem"}})


def test_tls_server_context_asks_for_client_certificates_only_with_a_client_ca(ca):
    server = ca.issue("server")
    tls = {"certificate": str(server.certificate), "key": str(server.key)}
    plain = server_tls_context(parse_config({**BASE, "tls": tls}))
    assert plain is not None and plain.verify_mode == ssl.CERT_NONE
    mutual = parse_config({**BASE, "tls": {**tls, "client_ca": str(ca.ca)}})
    context = server_tls_context(mutual)
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED
    own = self_tls(mutual)
    assert own is not None and own.ca == str(server.certificate) and own.key == str(server.key)
    assert server_tls_context(parse_config(BASE)) is None


def test_tls_server_context_refuses_a_certificate_it_cannot_use_naming_the_key(ca, tmp_path):
    server = ca.issue("other")
    missing = parse_config({**BASE, "tls": {"certificate": str(tmp_path / "none.pem"), "key": str(server.key)}})
    with pytest.raises(InvalidArgument, match="tls.certificate and tls.key .* cannot be used"):
        server_tls_context(missing)
    stranger = Authority(tmp_path / "stranger").issue("x")  # a key that is not the certificate's
    mismatched = parse_config({**BASE, "tls": {"certificate": str(server.certificate), "key": str(stranger.key)}})
    with pytest.raises(InvalidArgument, match="tls.certificate and tls.key"):
        server_tls_context(mismatched)
    (tmp_path / "junk.pem").write_text("not a certificate")
    junk_ca = parse_config(
        {
            **BASE,
            "tls": {
                "certificate": str(server.certificate),
                "key": str(server.key),
                "client_ca": str(tmp_path / "junk.pem"),
            },
        }
    )
    with pytest.raises(InvalidArgument, match="tls.client_ca"):
        server_tls_context(junk_ca)


def test_tls_a_peer_ca_that_cannot_be_read_is_refused_naming_the_peer(tmp_path):
    config = parse_config({**BASE, "peers": {"cw": {"address": "https://cw:1", "ca": str(tmp_path / "none.pem")}}})
    with pytest.raises(InvalidArgument, match="peers.cw.ca"):
        check_peer_cas(config)


def test_tls_tasks_are_given_the_served_certificates_and_never_a_key_in_the_same_file(ca, tmp_path):
    server = ca.issue("bundled")
    bundle = tmp_path / "bundle.pem"  # key and certificates in one file, as some tools write them
    bundle.write_text(server.key.read_text() + server.certificate.read_text())
    config = parse_config({**BASE, "tls": {"certificate": str(bundle), "key": str(bundle)}})
    text = task_ca(config)
    assert text is not None and text.count("BEGIN CERTIFICATE") == 2 and "PRIVATE KEY" not in text
    assert ClientTls(ca=text).context().verify_mode == ssl.CERT_REQUIRED  # PEM text serves as a CA
    assert task_ca(parse_config(BASE)) is None
