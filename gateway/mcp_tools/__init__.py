"""MCP servers as tools of the agents: their config, connections and tools."""
