"""How long a crashed part waits before it starts again: shared by channels and MCP servers."""

# A part that stops with an unexpected error is started again after this, doubling up to the cap.
RESTART_DELAY = 1.0
MAX_RESTART_DELAY = 60.0
