"""Running the surfaces: uvicorn for the HTTP API, the MCP SDK's stdio loop for ``mcp``."""

from __future__ import annotations

import sys
from typing import TextIO

from marginalia_core.api.access import api_token, check_bind, cors_origins
from marginalia_core.workspace import Workspace


def serve(
    ws: Workspace,
    *,
    host: str,
    port: int,
    mcp: bool = False,
    log_level: str = "info",
    err: TextIO | None = None,
) -> None:
    """Serve the API until interrupted. Refuses (``BindRefused``) a non-loopback ``host``
    without ``MARGINALIA_API_TOKEN``."""
    import uvicorn

    from marginalia_core.api.app import create_app

    token = api_token()
    check_bind(host, token)
    cors = cors_origins()
    app = create_app(ws, token=token, cors=cors, mcp=mcp, host=host)
    shown = f"[{host}]" if ":" in host else host
    out = err or sys.stderr
    out.write(
        f"Marginalia API on http://{shown}:{port} (docs /docs"
        f"{', MCP ' + 'at /mcp' if mcp else ''}; "
        f"{'token required' if token else 'no token: this machine only'}"
        f"{'; CORS ' + ', '.join(cors) if cors else ''})\n"
    )
    out.flush()
    uvicorn.run(app, host=host, port=port, log_level=log_level, server_header=False,
                timeout_graceful_shutdown=5)


def serve_mcp_stdio(ws: Workspace) -> None:
    """The MCP server on standard input/output (an MCP host starts it as a subprocess)."""
    from marginalia_core.api.mcp import build_mcp_server

    build_mcp_server(ws).run("stdio")
