"""One cluster's controller, in layers that import only downward (pyproject's contracts hold it):

- `process`: running a controller as a process (foreground, detached, stopping one);
- `http/`: the ASGI front and its guards: routing, connection limits, request bodies, the proxy;
- `app`: the `Controller` object, wired from a cluster's config;
- `api/`: the RPC handlers, a module per service area (jobs, launches, inbound handoffs, workers,
  endpoints, raw queries);
- `state/`: the state core, snapshot → decide → apply → act: the tick, transitions, the applier,
  retention, the federation store;
- `auth/`: who is calling and what they may do;
- `db/`: persistence: the schema, migrations and every SQL read and write.
"""
