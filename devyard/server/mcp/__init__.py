"""The per-instance MCP endpoint (``mcpUrl``, docs/mcp.md): the official `mcp` SDK's
Streamable HTTP server in the server process, driving each device through its device API."""

from .service import MCP_ENDPOINT, McpService, StoreAssets, is_mcp_path

__all__ = ["MCP_ENDPOINT", "McpService", "StoreAssets", "is_mcp_path"]
