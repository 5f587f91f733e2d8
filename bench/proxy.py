"""What the endpoint relay costs: latency added per request and streamed-download throughput, direct
to a task's server, through one controller (`/proxy/t/<token>/<name>/`) and through two (a public
parent relaying `/proxy/t/cluster=<child>/…` to the child).

Two real controller processes on loopback: `cw` (a local backend; `federation_public_parent` is the
parent) trusts the parent's key; `marin` lists `cw` as its peer. One job on `cw` runs the test
suite's serving task (tests/integration/serve_task.py: a standard-library HTTP server that
registers itself as endpoint `web`). The bench mints the URL with `MintEndpointUrl` on `cw`.

  1. Latency: N sequential `GET /hello` with one keep-alive client per path; p50 and p99 of each,
     and the p50 added over the direct connection. Target: ≤ 2 ms p50 added per hop.
  2. Throughput: one streamed `GET /bytes/<size>` per path, read in 1 MiB chunks and discarded
     (200 MB by default, 1 GB with --large). Target: ≥ 50 % of direct.
  3. Held requests: one caller opens --held (1,000) relayed `GET /hold` requests through the child
     at once, which the app answers only when released; meanwhile another client's `GetJobStatus`
     is timed, beside the same calls with nothing held. Printed: how many were held, refused (503)
     or failed, and the other client's p50/p99 idle and under the load. Target: p99 within 10× idle.

Figures are printed, never asserted; every wait is bounded; every process is stopped by PID. The
machine's `python -c pass` time is printed as a yardstick for how loaded it is.

    .venv/bin/python bench/proxy.py            # 500 requests, 200 MB download
    .venv/bin/python bench/proxy.py --large    # 1 GB download
    .venv/bin/python bench/proxy.py --json
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
from common import (  # noqa: E402
    ROOT,
    Controller,
    dump_json,
    local_backend,
    log,
    percentile,
    print_table,
    python_startup_ms,
    revision,
    wait_until,
)

from iris.client import IrisClient  # noqa: E402
from iris.controller.auth import load_or_create_signing_key, mint_token, public_key_pem  # noqa: E402

SERVE = str(ROOT / "tests" / "integration" / "serve_task.py")
USER = "bench"
FAST = {"tick_interval": "1s", "federation_heartbeat_interval": "1s", "federation_sync_interval": "1s"}


# The served app runs this interpreter, which a task's own uid may not reach (a root controller
# runs tasks as their users, and a Python under /root is closed to them): the proxy is measured
# with tasks under the controller's uid.
SAME_UID = {"task_uids": {"enabled": False}}


def start(base: Path, started: list[Controller]) -> tuple[Controller, Controller]:
    parent = Controller(
        "marin", base, [local_backend("cpu", workers=1, cpu=2)], settings=FAST, extra={"auth": SAME_UID}
    )
    trust = {
        "federation_peers": {"marin": public_key_pem(load_or_create_signing_key(None, parent.state_dir))},
        **SAME_UID,
    }
    child = Controller(
        "cw",
        base,
        [local_backend("cpu", workers=1, cpu=4)],
        settings=FAST,
        extra={
            "auth": trust,
            "federation_public_parent": parent.url,
            "defaults": {"task_env": {"PYTHONPATH": str(ROOT)}},
        },
    )
    started.append(child)
    child.start()
    parent.extra = {"peers": {"cw": {"address": child.url}}}
    started.append(parent)
    parent.start()
    return parent, child


def urls(parent: Controller, child: Controller) -> dict[str, str]:
    """The three base URLs of the served app: direct, through the child, through parent and child."""
    token = mint_token(load_or_create_signing_key(None, child.state_dir), child.name, USER, "user", 3600)
    with IrisClient(child.url, token=token) as c:
        job = c.submit([sys.executable, SERVE], name="serve", user=USER, cpu=1)
        eps = wait_until(lambda: [e for e in c.endpoints(job) if e.name == "web"], timeout=60, what="endpoint web")
        two_hops = c.endpoint_url(job, "web", 3600).url
    cap = two_hops.split(f"/proxy/t/cluster={child.name}/", 1)[1]
    return {
        "direct": f"http://{eps[0].address}/",
        "1 hop": f"{child.url}/proxy/t/{cap}",
        "2 hops": two_hops,
    }


def latency(base_url: str, n: int) -> list[float]:
    times = []
    with httpx.Client(timeout=30) as http:
        for _ in range(10):
            http.get(base_url + "hello").raise_for_status()
        for _ in range(n):
            t0 = time.perf_counter()
            http.get(base_url + "hello").raise_for_status()
            times.append((time.perf_counter() - t0) * 1000)
    return times


def throughput(base_url: str, size: int) -> float:
    """MB/s of one streamed download of `size` bytes."""
    got = 0
    with httpx.Client(timeout=120) as http:
        t0 = time.perf_counter()
        with http.stream("GET", base_url + f"bytes/{size}") as resp:
            resp.raise_for_status()
            for chunk in resp.iter_raw(1 << 20):
                got += len(chunk)
        elapsed = time.perf_counter() - t0
    if got != size:
        raise RuntimeError(f"downloaded {got} bytes of {size}")
    return size / elapsed / 1e6


def api_times(url: str, token: str, job: str, n: int) -> list[float]:
    times = []
    with IrisClient(url, token=token) as c:
        for _ in range(n):
            t0 = time.perf_counter()
            c.status(job)
            times.append((time.perf_counter() - t0) * 1000)
    return times


def held_load(child: Controller, capability: str, direct: str, job: str, token: str, held: int, n: int) -> dict:
    """Others' API latency, idle and while one caller holds `held` relayed requests (see docstring)."""
    idle = api_times(child.url, token, job, n)
    outcomes: list[int] = []

    async def hold_all() -> None:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=120, limits=limits) as http:

            async def one(i: int) -> None:
                try:
                    outcomes.append((await http.get(capability + f"hold/{i}")).status_code)
                except httpx.HTTPError:
                    outcomes.append(0)

            await asyncio.gather(*(one(i) for i in range(held)))

    holder = threading.Thread(target=lambda: asyncio.run(hold_all()), daemon=True)
    holder.start()
    wait_until(lambda: len(outcomes) >= held - 64 or not holder.is_alive(), timeout=120, what="the relay's answers")
    loaded = api_times(child.url, token, job, n)
    httpx.get(direct + "release-holds", timeout=30)
    holder.join(timeout=120)
    return {
        "held": held,
        "answered_503": outcomes.count(503),
        "answered_200": outcomes.count(200),
        "failed": outcomes.count(0),
        "idle_p50_ms": percentile(idle, 50),
        "idle_p99_ms": percentile(idle, 99),
        "loaded_p50_ms": percentile(loaded, 50),
        "loaded_p99_ms": percentile(loaded, 99),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=500, help="requests per path for latency (default 500)")
    ap.add_argument("--large", action="store_true", help="download 1 GB instead of 200 MB")
    ap.add_argument("--held", type=int, default=1000, help="relayed requests one caller holds at once (default 1000)")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    args = ap.parse_args()
    size = (1000 if args.large else 200) * 1000 * 1000
    quiet = args.json
    base = Path(tempfile.mkdtemp(prefix="iris-bench-proxy-"))
    started: list[Controller] = []
    try:
        parent, child = start(base, started)
        log("serving job starting on cw …", quiet)
        paths = urls(parent, child)
        results = {}
        for name, url in paths.items():
            log(f"[{name}] {args.requests} requests, then a {size // 1_000_000} MB download …", quiet)
            times = latency(url, args.requests)
            results[name] = {
                "p50_ms": percentile(times, 50),
                "p99_ms": percentile(times, 99),
                "mb_per_s": throughput(url, size),
            }
        log(f"[held] one caller holds {args.held} relayed requests while another's API calls are timed …", quiet)
        token = mint_token(load_or_create_signing_key(None, child.state_dir), child.name, "other", "user", 3600)
        with IrisClient(child.url, token=token) as c:
            job = c.submit(["sleep", "3600"], name="api-probe", user="other", cpu=1)
        held = held_load(child, paths["1 hop"], paths["direct"], job, token, args.held, args.requests)
        direct = results["direct"]
        for r in results.values():
            r["added_p50_ms"] = r["p50_ms"] - direct["p50_ms"]
            r["throughput_vs_direct"] = r["mb_per_s"] / direct["mb_per_s"]
        startup = python_startup_ms()
        if args.json:
            dump_json(
                {"revision": revision(), "python_startup_ms": startup, "download_bytes": size, **results, "held": held}
            )
            return
        print(f"revision {revision()}; python -c pass: {startup:.1f} ms; download {size // 1_000_000} MB")
        print_table(
            ["path", "p50 ms", "p99 ms", "added p50 ms", "MB/s", "vs direct"],
            [
                [
                    name,
                    f"{r['p50_ms']:.2f}",
                    f"{r['p99_ms']:.2f}",
                    f"{r['added_p50_ms']:.2f}",
                    f"{r['mb_per_s']:.0f}",
                    f"{100 * r['throughput_vs_direct']:.0f}%",
                ]
                for name, r in results.items()
            ],
        )
        print("targets: ≤ 2 ms p50 added per hop; ≥ 50 % of direct throughput")
        print(
            f"\n{held['held']} relayed requests held by one caller: {held['answered_200']} held until released,"
            f" {held['answered_503']} refused at once, {held['failed']} failed; another client's GetJobStatus"
            f" p50/p99 {held['idle_p50_ms']:.2f}/{held['idle_p99_ms']:.2f} ms idle,"
            f" {held['loaded_p50_ms']:.2f}/{held['loaded_p99_ms']:.2f} ms meanwhile"
            f" ({held['loaded_p99_ms'] / held['idle_p99_ms']:.1f}× idle p99; target ≤ 10×)"
        )
    finally:
        for ctl in reversed(started):
            ctl.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
