"""The `[web]` section: the browser console the daemon serves, where it listens, how it is reached."""

from __future__ import annotations

from pydantic import field_validator

from bot.config.fields import HttpUrl, ListenAddress, Section


class WebConfig(Section):
    """Off unless enabled; on loopback unless told otherwise (put a proxy with HTTPS in front)."""

    enabled: bool = False
    listen: ListenAddress = "127.0.0.1:8787"
    # The address people open (https://bot.example.com/console): its path prefixes every link and
    # an https URL makes the cookies Secure. Unset: http://<listen>/.
    public_url: HttpUrl | None = None
    # Behind a reverse proxy: take the client's address (for the login rate limit) from the last
    # X-Forwarded-For entry the proxy appended, instead of the proxy's own address.
    trust_forwarded: bool = False

    @field_validator("public_url", mode="after")
    @classmethod
    def _without_query(cls, value: str | None) -> str | None:
        if value is not None and ("?" in value or "#" in value):
            raise ValueError("a URL without a query or fragment, such as 'https://bot.example.com/console'")
        return value

    @property
    def secure(self) -> bool:
        """Whether the console is reached over HTTPS (its cookies are then Secure)."""
        return (self.public_url or "").startswith("https://")

    @property
    def base_path(self) -> str:
        """The path every page sits under ("" at the root, "/console" under a prefix)."""
        from urllib.parse import urlsplit

        return urlsplit(self.public_url).path.rstrip("/") if self.public_url else ""
