"""jpfs as an MCP server (``jpfs mcp``) and its plain JSON tool export (``jpfs tools``).

:mod:`jpfs.mcp.caller` is the protocol-free half (which tools, which caller
conversation, one tool call with cancel and progress); :mod:`jpfs.mcp.server` adapts
it to the official ``mcp`` SDK, which is imported only there (it costs a second).
"""
