"""The dashboard: which files the controller serves at `/` and under `/static/`, and with what headers.

The pages are plain HTML, CSS and JavaScript modules, committed as written, with no build step: a
browser loads them as they are, so the wheel carries them as package data, the controller serves
them from disk, tests and air-gapped clusters need no npm registry, and what runs is what is
reviewed. They hold no data path of their own: every page calls the same Connect JSON endpoints
(`/iris.v1.ControllerService/<Method>`) as the CLI and the SDK, with the caller's token from
the browser session, so the server's auth rules apply to the dashboard unchanged.

The content security policy allows scripts, styles and fetches from this origin only: job names
and log lines are shown as text, and even a slip that rendered one as HTML could not run it.
"""

from __future__ import annotations

from pathlib import Path

from starlette.responses import FileResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parent / "static"

SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}


class _Static(StaticFiles):
    async def get_response(self, path, scope):
        response = await super().get_response(path, scope)
        response.headers.update(SECURITY_HEADERS)
        return response


async def _index(_request):
    return FileResponse(STATIC_DIR / "index.html", headers=SECURITY_HEADERS)


def routes() -> list:
    """The dashboard's routes: the single page at `/` and its assets under `/static/`."""
    return [Route("/", _index), Mount("/static", app=_Static(directory=STATIC_DIR), name="static")]
