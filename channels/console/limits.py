"""What the console takes in one message, and the line a longer one gets (the pipe and the terminal)."""

MAX_MESSAGE_BYTES = 64 * 1024


def too_long(size: int, limit: int) -> str:
    """The one line a message over the console's limit gets."""
    return (f"Not sent: that message is {_size(size)}; the console takes up to {_size(limit)}. "
            "Send it in parts.")


def _size(size: int) -> str:
    return f"{size / 1024:.0f} KiB" if size >= 1024 else f"{size} bytes"
