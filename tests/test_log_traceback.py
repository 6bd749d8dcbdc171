"""Logged tracebacks: rendered in both formats, and redacted like every other field."""

from __future__ import annotations

import io
import json
import logging

import pytest
import structlog

from bot.config import MediaConfig
from bot.core.errors import describe
from bot.core.log import REDACTED, configure_logging
from bot.media.intake import Offer, take

TOKEN = "123456789:AAHs0me-Telegram-Token-Value-0123456789ab"
KNOWN = "a-configured-secret-value"



def _fail_with_token() -> None:
    raise ConnectionError(f"POST https://api.telegram.org/bot{TOKEN}/sendMessage with {KNOWN} failed")


def _log_failure(logger: structlog.stdlib.BoundLogger | logging.Logger) -> None:
    try:
        _fail_with_token()
    except ConnectionError as exc:
        if isinstance(logger, logging.Logger):
            logger.warning("library line", exc_info=True)
        else:
            logger.warning("send failed", error=describe(exc), exc_info=True)


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_a_logged_traceback_is_rendered_with_its_token_redacted(fmt: str, log_stream: io.StringIO) -> None:
    """A handler logging with exc_info shows the traceback (down to the raising function) in JSON
    and console output, with the token and the configured secret blanked in the traceback too."""
    configure_logging("INFO", fmt, secrets=[KNOWN], stream=log_stream)
    _log_failure(structlog.get_logger("bot.test"))

    out = log_stream.getvalue()
    assert "Traceback (most recent call last)" in out
    assert "_fail_with_token" in out
    assert TOKEN not in out and TOKEN.split(":")[1] not in out
    assert KNOWN not in out
    assert REDACTED in out
    if fmt == "json":
        line = json.loads(out.splitlines()[0])
        assert line["event"] == "send failed"
        assert line["error"].startswith("ConnectionError: POST https://api.telegram.org")
        assert "ConnectionError" in line["exception"] and REDACTED in line["exception"]


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_a_library_traceback_is_redacted_too(fmt: str, log_stream: io.StringIO) -> None:
    """A stdlib logger's traceback (python-telegram-bot's, discord.py's) goes through the same
    redaction before it is written."""
    configure_logging("INFO", fmt, secrets=[KNOWN], stream=log_stream)
    _log_failure(logging.getLogger("telegram.ext.test"))

    out = log_stream.getvalue()
    assert "Traceback (most recent call last)" in out and "_fail_with_token" in out
    assert TOKEN not in out and KNOWN not in out


def test_describe_says_type_and_message() -> None:
    """`describe` is `Type: message`, and still names the type when the message cannot be made."""

    class Broken(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert describe(TimeoutError("no answer")) == "TimeoutError: no answer"
    assert describe(TimeoutError()) == "TimeoutError: "
    assert describe(Broken()) == "Broken: (no message)"


async def test_a_failed_download_logs_its_traceback_without_the_token(log_stream: io.StringIO) -> None:
    """A file whose download fails is stored with a note, with one warning and, at DEBUG, the traceback
    of the failure (down to the platform call), the bot token in its URL redacted in both."""
    configure_logging("DEBUG", "json", stream=log_stream)

    async def download() -> bytes:
        _fail_with_token()
        return b""

    async def keep(data: bytes) -> str:
        raise AssertionError("nothing to keep")

    media = await take(Offer("photo", download, mime="image/jpeg"), MediaConfig(), keep)

    assert (media.status, media.note) == ("failed", "the download failed")
    warning, detail = [json.loads(text) for text in log_stream.getvalue().splitlines()]
    assert (warning["event"], warning["level"]) == ("file download failed; the message is stored with a note",
                                                    "warning")
    assert warning["error"].startswith("ConnectionError: POST https://api.telegram.org")
    assert "exception" not in warning
    assert (detail["event"], detail["level"]) == ("file download failure", "debug")
    assert "_fail_with_token" in detail["exception"] and "in download" in detail["exception"]
    assert TOKEN not in log_stream.getvalue()
