"""The library as a service: the HTTP API (``marginalia serve``) and the MCP server
(``marginalia mcp``, or ``serve --mcp`` at /mcp), thin surfaces over one Workspace."""
