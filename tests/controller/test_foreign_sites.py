"""On a cluster whose `auth.trusted_cidrs` opts loopback in, a tokenless call from loopback that names another site in its Host or Origin header (a web page
whose name was pointed at 127.0.0.1: DNS rebinding) is refused instead of acting as local_admin,
and writes nothing; the same call with a token, or naming the controller, goes through."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from iris.controller.auth.sites import OwnSites, host_name
from tests.controller.helpers import client, job_count, user_token


def _launch(url: str, name: str, headers: dict[str, str]) -> tuple[int, dict]:
    body = json.dumps({"name": name, "user": "mallory", "command": ["true"]}).encode()
    request = urllib.request.Request(
        f"{url}/iris.v1.ControllerService/LaunchJob",
        body,
        {"content-type": "application/json", **headers},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_page_of_another_site_is_never_local_admin(controller_factory):
    # Only a cluster that opts loopback in makes tokenless TCP callers local_admin at all.
    ctl = controller_factory(auth={"trusted_cidrs": ["127.0.0.0/8", "::1/128"]})
    before = job_count(client(ctl))
    for headers in (
        {"Host": "rebind.attacker.example"},
        {"Host": f"rebind.attacker.example:{ctl.port}", "Origin": f"http://rebind.attacker.example:{ctl.port}"},
        {"Origin": "http://attacker.example"},
        {"Origin": "null"},
    ):
        status, answer = _launch(ctl.url, "rebound", headers)
        assert status == 401 and answer["code"] == "unauthenticated", (headers, answer)
        assert "another site" in answer["message"] or "page of another site" in answer["message"], answer
    assert job_count(client(ctl)) == before
    # Its own names, and any caller with a token whatever it names, go through.
    assert _launch(ctl.url, "by-address", {"Origin": ctl.url})[0] == 200
    assert _launch(ctl.url, "by-name", {"Host": f"localhost:{ctl.port}"})[0] == 200
    token = user_token(ctl, "mallory")
    assert (
        _launch(ctl.url, "with-token", {"Host": "rebind.attacker.example", "Authorization": f"Bearer {token}"})[0]
        == 200
    )


@pytest.mark.parametrize(
    ("authority", "owned"),
    [
        ("127.0.0.1:10000", True),
        ("[::1]:10000", True),
        ("10.1.2.3", True),
        ("LOCALHOST:1", True),
        ("marin.example.org:443", True),
        ("evil.example", False),
        ("127.0.0.1.evil.example", False),
        ("", False),
    ],
)
def test_own_sites_are_addresses_and_the_controllers_names(authority, owned):
    sites = OwnSites.of("0.0.0.0:10000", "https://marin.example.org")
    assert sites.owns(authority) is owned
    assert host_name("[::1]:80") == "::1" and host_name("Example.ORG:8") == "example.org"
