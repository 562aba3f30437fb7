"""OpenAI-style function schemas of the agent tools, generated from agents.tools (the MCP server's
source too), and the dispatcher a function-calling harness runs a tool call through."""

from __future__ import annotations

import json
from typing import Any

from agents.tools import TOOLS, ToolError, call_tool
from service.client import Client


def function_schema(name: str) -> dict[str, Any]:
    tool = next(t for t in TOOLS if t.name == name)
    # strict mode would demand every property be required: optional arguments with defaults are the
    # point of these tools, so the schemas are served non-strict.
    return {"type": "function",
            "function": {"name": tool.name, "description": tool.description, "parameters": tool.input_schema(),
                         "strict": False}}


def openai_tools() -> list[dict[str, Any]]:
    return [function_schema(t.name) for t in TOOLS]


def dispatch(client: Client, name: str, arguments: str | dict[str, Any] | None) -> str:
    """Run one tool call (arguments as the model sent them: a JSON string) and return the text to put in
    the tool message: the compact JSON result, or the error for the model to read."""
    try:
        args = json.loads(arguments) if isinstance(arguments, str) and arguments.strip() else (arguments or {})
        if not isinstance(args, dict):
            raise ToolError(f"arguments for {name} must be a JSON object")
        return call_tool(client, name, args).model_dump_json()
    except json.JSONDecodeError as exc:
        return f"error: arguments for {name} are not valid JSON: {exc}"
    except ToolError as exc:
        return f"error: {exc}"
