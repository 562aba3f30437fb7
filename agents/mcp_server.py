"""The kerneltune MCP server: every tool of agents.tools over stdio or streamable HTTP.

    python -m agents.mcp_server --transport stdio --api http://127.0.0.1:8765
    python -m agents.mcp_server --transport http --api http://127.0.0.1:8765 --port 8766   # POST /mcp

Built on the SDK's low-level Server rather than MCPServer's decorators: the tools' schemas must be
exactly agents.tools' (the same ones GET /v1/tools serves), not re-derived from function signatures.
The server is a thin client of the REST API: it holds no state but the API URL and token.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

from agents.tools import TOOLS, ToolError, call_tool
from service.client import Client

log = logging.getLogger("kerneltune.mcp")

INSTRUCTIONS = (
    "kerneltune evaluates kernel variants for the decode path of MoE LLMs. Loop: list_slots -> get_slot "
    "(template, shapes, stock figures) -> submit_variant -> start_evaluation -> wait_for_job (summary and "
    "hints) -> revise and resubmit with parent_id -> leaderboard / winners.")


def mcp_tools() -> list[types.Tool]:
    return [types.Tool(name=t.name, description=t.description, input_schema=t.input_schema(),
                       output_schema=t.output_schema(),
                       annotations=types.ToolAnnotations(read_only_hint=t.read_only, open_world_hint=False))
            for t in TOOLS]


def build_server(api_url: str | None = None, token: str | None = None, timeout_s: float = 60.0) -> Server[Any]:
    client = Client(api_url, token=token, timeout=timeout_s)
    tools = mcp_tools()

    async def on_list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
                            ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def on_call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
                           ) -> types.CallToolResult:
        try:
            # The handlers are blocking HTTP calls (wait_for_job polls for minutes): keep them off the loop.
            out = await anyio.to_thread.run_sync(call_tool, client, params.name, params.arguments,
                                                 abandon_on_cancel=True)
        except ToolError as exc:
            return types.CallToolResult(content=[types.TextContent(type="text", text=str(exc))], is_error=True)
        data = out.model_dump(mode="json")
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(data, separators=(",", ":")))],
            structured_content=data)

    return Server("kerneltune", version="0.1.0", instructions=INSTRUCTIONS,
                  on_list_tools=on_list_tools, on_call_tool=on_call_tool)


async def serve_stdio(server: Server[Any]) -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve_http(server: Server[Any], host: str, port: int, path: str = "/mcp") -> None:
    import uvicorn

    app = server.streamable_http_app(streamable_http_path=path, host=host)
    uvicorn.run(app, host=host, port=port, log_level="warning")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m agents.mcp_server", description=__doc__.split("\n\n")[0])
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    p.add_argument("--api", default=None, help="kerneltune API base URL (default $KT_API_URL or http://127.0.0.1:8765)")
    p.add_argument("--token", default=None, help="API bearer token (default $KT_TOKEN)")
    p.add_argument("--host", default="127.0.0.1", help="http transport: bind address")
    p.add_argument("--port", type=int, default=int(os.environ.get("KT_MCP_PORT", "8766")), help="http transport: port")
    p.add_argument("--path", default="/mcp", help="http transport: endpoint path")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)  # stderr: stdout is the stdio transport's wire
    server = build_server(args.api, args.token)
    if args.transport == "stdio":
        anyio.run(serve_stdio, server)
    else:
        serve_http(server, args.host, args.port, args.path)


if __name__ == "__main__":
    main()
