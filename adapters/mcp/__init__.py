"""The gateway as an MCP server: `/mcp` on the HTTP API (Streamable HTTP, behind the API's
credentials) and `agenvoy mcp`, which carries an editor's stdio to it."""
