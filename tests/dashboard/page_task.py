"""A task that serves one web page through its endpoint `web`, the page a hostile user would serve:
its script tries to read the dashboard's session token and to stop another user's job through the
controller's API (which it reaches at the same address as the page), and also uses its own app as
any served app does (a relative GET and a JSON POST). It writes what each try got into the page.

Run by the endpoint page tests as a real job's command: `page_task.py VICTIM_JOB_ID`."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from iris.client.client import IrisClient

PAGE = """<!doctype html><html><head><title>loading</title></head><body><pre id="out"></pre><script>
const out = {};
const api = (m, body) => fetch("/iris.v1.ControllerService/" + m,
  {method: "POST", headers: {"content-type": "application/json"}, body: JSON.stringify(body)});
async function tryIt(key, fn) {
  try { out[key] = await fn(); } catch (e) { out[key] = "blocked: " + e.name; }
}
(async () => {
  await tryIt("token", async () => "read: " + sessionStorage.getItem("iris.token"));
  await tryIt("stop", async () => { const r = await api("TerminateJob", {job_id: VICTIM}); return r.status + " " + await r.text(); });
  await tryIt("stop_simple", async () => {  // a "simple" request: sent without asking first
    const r = await fetch("/iris.v1.ControllerService/TerminateJob", {method: "POST", body: JSON.stringify({job_id: VICTIM})});
    return r.status + " " + await r.text();
  });
  await tryIt("own_get", async () => (await (await fetch("data.json")).json()).own);
  await tryIt("own_post", async () => (await (await fetch("echo", {method: "POST",
    headers: {"content-type": "application/json"}, body: JSON.stringify({own: "posted"})})).json()).own);
  document.getElementById("out").textContent = JSON.stringify(out);
  document.title = "done";
})();
</script></body></html>"""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    page = b""

    def log_message(self, *args):
        pass

    def _send(self, body: bytes, ctype: str) -> None:
        self.send_response(200)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path.endswith("/data.json"):
            self._send(b'{"own": "fetched"}', "application/json")
        else:
            self._send(self.page, "text/html; charset=utf-8")

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        self._send(body, "application/json")


def main() -> None:
    Handler.page = PAGE.replace("VICTIM", json.dumps(sys.argv[1])).encode()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    IrisClient().register_endpoint("web", httpd.server_address[1])
    print("serving", flush=True)
    threading.Event().wait()  # serves until the job is stopped


if __name__ == "__main__":
    main()
