"""Agent-facing tools of kerneltune: one definition per tool (agents.tools) served over MCP
(agents.mcp_server) and as OpenAI-style function schemas (agents.openai_schema, GET /v1/tools)."""
