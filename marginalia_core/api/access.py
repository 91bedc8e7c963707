"""Who may reach the API: loopback only without a token; with ``MARGINALIA_API_TOKEN`` every
request carries ``Authorization: Bearer <token>`` (compared in constant time). CORS stays off
unless ``MARGINALIA_API_CORS`` lists origins. The token is never logged or echoed."""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

TOKEN_ENV = "MARGINALIA_API_TOKEN"
CORS_ENV = "MARGINALIA_API_CORS"
# paths answered without a token: none. Health, docs and the MCP endpoint are protected too, so
# nothing about the library (not even that it exists) shows to a caller without the token.
UNAUTHORIZED_MESSAGE = (
    "Missing or wrong API token: send the header 'Authorization: Bearer <token>' with the value "
    f"of {TOKEN_ENV}."
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BindRefused(ValueError):
    """A non-loopback address without a token."""


def api_token(environ: MutableMapping[str, str] | None = None) -> str | None:
    """The configured token, or None (blank counts as none)."""
    value = (environ if environ is not None else os.environ).get(TOKEN_ENV, "")
    return value.strip() or None


def cors_origins(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Origins allowed to call the API from a browser (comma separated); none by default."""
    value = (environ if environ is not None else os.environ).get(CORS_ENV, "")
    return [o.strip().rstrip("/") for o in value.split(",") if o.strip()]


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or the name localhost."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to listen past this machine without a token (``BindRefused`` says how to fix it)."""
    if token is None and not is_loopback(host):
        raise BindRefused(
            f"Refusing to listen on {host} without an API token: anyone who can reach this "
            f"machine could read and change your library. Set {TOKEN_ENV} to a long random "
            "secret (for example `python -c \"import secrets; print(secrets.token_urlsafe(32))\"`)"
            " and send it as 'Authorization: Bearer <token>', or listen on 127.0.0.1."
        )


def token_matches(header: str | None, token: str) -> bool:
    """``Authorization: Bearer <token>``, compared in constant time."""
    if not header:
        return False
    scheme, _, given = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode("utf-8"), token.encode("utf-8"))


class BearerTokenMiddleware:
    """Pure ASGI (so streamed responses pass through untouched): a request without the right
    token gets 401 before any route, and the MCP endpoint, runs."""

    def __init__(self, app: ASGIApp, token: str):
        self.app = app
        self._token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        header = None
        for key, value in scope.get("headers") or ():
            if key == b"authorization":
                header = value.decode("latin-1")
                break
        if token_matches(header, self._token):
            # no exemption, OPTIONS included: a CORS preflight from a listed origin is answered
            # by the CORS middleware, which sits outside this one, before it gets here
            await self.app(scope, receive, send)
            return
        body = json.dumps({"type": "error", "message": UNAUTHORIZED_MESSAGE,
                           "reason": "unauthorized"}).encode("utf-8")
        await send({
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode("ascii")),
                (b"www-authenticate", b'Bearer realm="marginalia"'),
            ],
        })
        await send({"type": "http.response.body", "body": body})
