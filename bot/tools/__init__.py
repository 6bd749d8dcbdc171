"""Tools the agent may call while it answers: the shared interface, the built-ins, MCP servers."""
