"""The controller's HTTP front and its guards: one ASGI callable that routes the Connect API, the
dashboard, `/health` and `/proxy`, and bounds what any caller can hold (connections, request bodies,
relayed requests). Nothing here decides job state; it hands each call to `iris.controller.api`.
"""
