"""`GET /healthz`: the web role's health check, answered at the ASGI edge.

Load balancers probe a task by its IP address, which is not in `ALLOWED_HOSTS`, so the answer
comes before Django's host validation; it says the process serves requests. The database's health
has its own alarms (see infra/terraform/modules/observability): a failing database must not make
every web task look dead at once.
"""

from __future__ import annotations


def with_healthz(app):
    async def application(scope, receive, send):
        if scope["type"] == "http" and scope["path"] == "/healthz":
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"cache-control", b"no-store")],
                }
            )
            await send({"type": "http.response.body", "body": b"ok\n"})
            return
        await app(scope, receive, send)

    return application
