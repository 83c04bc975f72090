"""The HTTP server: the API, the event streams and the web inbox (`interlock serve`).

Build the ASGI app with `interlock.server.app.create_app`; the modules beside it are its
parts (routers, auth, quotas, streams, schemas).
"""

__all__: list[str] = []
