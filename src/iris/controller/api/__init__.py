"""The API handlers: thin translations between RPC messages and the state core, one module per
service area. Each handler is wrapped by `handler.rpc` (identity, authorization, bounds, error codes);
what a call reads or writes goes through `iris.controller.db` and the applier.
"""
