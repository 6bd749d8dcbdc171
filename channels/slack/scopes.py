"""The OAuth scopes a Slack app's bot token needs for this channel (the manifest in
docs/channels.md asks for them), and those it uses where granted; `doctor` checks them."""

from __future__ import annotations

# Reading the conversations the app is in (events and catch-up), names, files shared, and posting.
NEEDED = frozenset({
    "app_mentions:read", "channels:history", "groups:history", "im:history", "mpim:history",
    "chat:write", "users:read", "files:read",
})
# Used where granted: an assistant thread's "is thinking…" status (Agents & AI Apps).
OPTIONAL = frozenset({"assistant:write"})


def granted(header: str | None) -> frozenset[str]:
    """The scopes in Slack's `x-oauth-scopes` response header ("chat:write,users:read")."""
    return frozenset(s.strip() for s in (header or "").split(",") if s.strip())
