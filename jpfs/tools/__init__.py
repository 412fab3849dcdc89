"""Agent tools: one registry, one implementation each, adapters (provider, MCP, CLI) on top."""
