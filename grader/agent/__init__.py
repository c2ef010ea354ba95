"""Agent tools (compile, bench, profile, measure_peak, accept) and their MCP server."""
