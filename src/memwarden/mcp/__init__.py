"""The MCP server for agents (``memwarden mcp``)."""

from __future__ import annotations

from memwarden.mcp._server import build_server, context_line, render_context, run_stdio

__all__ = ["build_server", "context_line", "render_context", "run_stdio"]
