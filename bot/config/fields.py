"""Config field types shared by every section: ids, URLs, environment variable names, the base model."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

NonNegInt = Annotated[int, Field(ge=0)]
PosInt = Annotated[int, Field(ge=1)]
PosFloat = Annotated[float, Field(gt=0)]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


def _id_text(value: Any) -> Any:
    # Ids are written as TOML integers (or strings); the core compares them as strings.
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


PlatformId = Annotated[str, BeforeValidator(_id_text), Field(pattern=r"^-?[0-9]+$")]


def _numeric_key(value: str) -> str:
    if not value.lstrip("-").isdigit() or not value.isascii():
        raise ValueError("a numeric id as the key, such as \"123456789\" or \"-1001234567890\"")
    return value


# A table keyed by a chat, user, guild or channel id (TOML keys are strings).
IdKey = Annotated[str, AfterValidator(_numeric_key)]
# Slack's ids: a capital letter for the kind (U, W user; C, G channel; D DM; T workspace), then
# capitals and digits.
SlackId = Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9]{2,}$")]


def _slack_key(value: str) -> str:
    if not (len(value) > 2 and value.isascii() and value.isalnum() and value.isupper()
            and value[0].isalpha()):
        raise ValueError("a Slack id as the key, such as \"U0123ABCD\" or \"C0123ABCD\"")
    return value


# A table keyed by a Slack user or channel id.
SlackKey = Annotated[str, AfterValidator(_slack_key)]
# Matrix ids: a sigil, a localpart, a colon and the server name ("@ada:example.org",
# "!abc123:example.org"); the server part may carry a port.
MatrixUserId = Annotated[str, Field(pattern=r"^@[^:\s]+:[^\s]+$")]
MatrixRoomId = Annotated[str, Field(pattern=r"^![^:\s]+:[^\s]+$")]


def _matrix_key(value: str) -> str:
    if re.fullmatch(r"[@!][^:\s]+:[^\s]+", value) is None:
        raise ValueError("a Matrix id as the key, such as \"@ada:example.org\" or \"!abc:example.org\"")
    return value


# A table keyed by a Matrix user or room id.
MatrixKey = Annotated[str, AfterValidator(_matrix_key)]


def _http_url(value: str) -> str:
    # Checked here: the HTTP clients would refuse it only when the daemon first connects (Telegram
    # then retries forever; the Anthropic SDK raises mid-start).
    expected = "an http:// or https:// URL with a host, such as 'https://api.example.com'"
    if not value.isprintable() or any(ch.isspace() for ch in value):
        raise ValueError(expected)
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError as exc:
        raise ValueError(expected) from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(expected)
    return value


HttpUrl = Annotated[str, AfterValidator(_http_url)]


SECRET_IN_FILE = "secret_in_file"  # a validation error whose input must never be shown


def _postgres_url(value: str) -> str:
    expected = "a postgresql:// URL such as 'postgresql://switchboard@db.example.com:5432/switchboard'"
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError as exc:
        raise ValueError(expected) from exc
    if parts.scheme not in ("postgresql", "postgres") or any(ch.isspace() for ch in value):
        raise ValueError(expected)
    if parts.password is not None or "password=" in parts.query.lower():
        # Its own error type: the config error then never shows the value (nor the password).
        raise PydanticCustomError(
            SECRET_IN_FILE,
            "a URL without a password (secrets never go in the file): set PGPASSWORD, name "
            "another variable in [database] password_env, or use ~/.pgpass",
        )
    return value


PostgresUrl = Annotated[str, AfterValidator(_postgres_url)]


def postgres_url_problem(value: str) -> tuple[str, bool] | None:
    """What is wrong with `value` as a PostgreSQL URL, and whether it is a password in it (the
    value must then never be shown); None when it is a URL the store accepts."""
    try:
        _postgres_url(value)
    except PydanticCustomError as exc:
        return str(exc), True
    except ValueError as exc:
        return str(exc), False
    return None


def split_listen(value: str) -> tuple[str, int]:
    """The host and port of a listen address: "0.0.0.0:8443", "[::]:8443" or "localhost:8080"."""
    host, colon, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not colon or not host or not port.isdigit() or not 1 <= int(port) <= 65535 or " " in host:
        raise ValueError("a HOST:PORT address with a port from 1 to 65535, such as '0.0.0.0:8443' "
                         "or '[::]:8443'")
    return host, int(port)


def _listen_address(value: str) -> str:
    split_listen(value)
    return value


# Where a server of ours listens (the Telegram webhook): checked when the file is read, not at bind.
ListenAddress = Annotated[str, AfterValidator(_listen_address)]
# The longest reply any Claude model writes is 128k tokens; more is a typo, not a wish.
MAX_REPLY_TOKENS = 128_000
# SQLite and the platforms' APIs hold 64-bit integers; a bigger one in the file is a typo.
MAX_INT = 2**63 - 1
Policy = Literal["allowlist", "open", "disabled"]
# Private chats may also pair: a stranger gets a code an admin approves (`switchboard pairing`).
DmPolicy = Literal["allowlist", "open", "disabled", "pairing"]


def known_timezone(value: str) -> str:
    """The name itself when it is an IANA timezone, else a ValueError saying what is expected."""
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError("an IANA timezone name such as 'Europe/Berlin'") from exc
    return value


class Section(BaseModel):
    # inf and nan parse as TOML floats but no timeout, share or window means them.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
