"""GET /v1/tools: the agent tools as OpenAI-style function schemas (same source as the MCP server's)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from agents.openai_schema import openai_tools

router = APIRouter(prefix="/v1/tools", tags=["agents"])


@router.get("", summary="Agent tools as OpenAI-style function schemas")
def list_tools() -> list[dict[str, Any]]:
    """Each entry: {"type": "function", "function": {name, description, parameters (JSON Schema), strict}}.
    The MCP server (python -m agents.mcp_server) serves the same tools with the same input schemas."""
    return openai_tools()
