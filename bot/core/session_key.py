"""Session keys: the one place that builds and parses `agent:<id>:<provider>:<kind>:<peer>[...]`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from bot.core.errors import SessionKeyError

ChatKind = Literal["direct", "group", "channel", "room"]
SuffixKind = Literal["thread", "topic"]

KINDS: tuple[ChatKind, ...] = ("direct", "group", "channel", "room")
SUFFIXES: tuple[SuffixKind, ...] = ("thread", "topic")
_KIND_ALIASES: dict[str, ChatKind] = {"dm": "direct"}
# A peer starting with one of these is a Matrix id, the one kind of peer with colons in it
# (`@user:server`, `!room:server`); every other part of a key has none.
MATRIX_SIGILS = ("@", "!")
MATRIX_EVENT_SIGIL = "$"
# Whitespace as str.isspace() knows it (re's \s is the same set), in one search rather than a
# generator over each character: keys are built and parsed several times per message.
_SPACE = re.compile(r"\s")


@dataclass(frozen=True, slots=True)
class SessionKey:
    """A parsed session key; `str(key)` gives its canonical text form."""

    agent_id: str
    provider: str
    kind: ChatKind
    peer: str
    suffix_kind: SuffixKind | None = None
    suffix_id: str | None = None

    def __post_init__(self) -> None:
        for name in ("agent_id", "provider"):
            _check_part(name, getattr(self, name))
        _check_part("peer", self.peer, colons=self.peer[:1] in MATRIX_SIGILS)
        if self.kind not in KINDS:
            raise SessionKeyError(f"unknown chat kind {self.kind!r}; expected one of {KINDS}")
        if (self.suffix_kind is None) != (self.suffix_id is None):
            raise SessionKeyError("a thread/topic suffix needs both its kind and its id")
        if self.suffix_kind is not None:
            if self.suffix_kind not in SUFFIXES:
                raise SessionKeyError(
                    f"unknown suffix {self.suffix_kind!r}; expected one of {SUFFIXES}"
                )
            # A Matrix thread's root is an event id, `$id:server` in rooms of versions 1 and 2.
            _check_part("suffix_id", self.suffix_id or "", colons=self.peer[:1] in MATRIX_SIGILS
                        and (self.suffix_id or "")[:1] == MATRIX_EVENT_SIGIL)

    def __str__(self) -> str:
        base = f"agent:{self.agent_id}:{self.provider}:{self.kind}:{self.peer}"
        if self.suffix_kind is None:
            return base
        return f"{base}:{self.suffix_kind}:{self.suffix_id}"

    @property
    def is_direct(self) -> bool:
        return self.kind == "direct"

    def base(self) -> SessionKey:
        """The key without its thread/topic suffix (per-DM limits are looked up on this)."""
        return SessionKey(self.agent_id, self.provider, self.kind, self.peer)


def _check_part(name: str, value: str, *, colons: bool = False) -> None:
    if not isinstance(value, str) or not value:
        raise SessionKeyError(f"session key part {name} must be a non-empty string")
    if (":" in value and not colons) or _SPACE.search(value) is not None:
        raise SessionKeyError(
            f"session key part {name}={value!r} must not contain ':' or whitespace"
        )


def build(
    agent_id: str,
    provider: str,
    kind: ChatKind,
    peer: str | int,
    *,
    thread: str | int | None = None,
    topic: str | int | None = None,
) -> SessionKey:
    """Build a key from its parts; ids may be ints (Telegram group ids are negative)."""
    if thread is not None and topic is not None:
        raise SessionKeyError("a session key has a thread or a topic, not both")
    if thread is not None:
        return SessionKey(agent_id, provider, kind, str(peer), "thread", str(thread))
    if topic is not None:
        return SessionKey(agent_id, provider, kind, str(peer), "topic", str(topic))
    return SessionKey(agent_id, provider, kind, str(peer))


def parse(text: str) -> SessionKey:
    """Parse `agent:<id>:<provider>:<kind>:<peer>[:thread|topic:<id>]`, `dm` meaning `direct`; a
    Matrix peer (`@user:server`, `!room:server`) has colons of its own."""
    parts = text.split(":")
    if len(parts) > 5 and parts[4][:1] in MATRIX_SIGILS:
        # A Matrix peer ("@ada:example.org", "!room:example.org:8448") keeps its colons; a
        # thread suffix is the first "thread" before an event id ("$root", or "$root:server"
        # in rooms of versions 1 and 2, colons kept), else the last two parts.
        cut = next((i for i in range(5, len(parts) - 1)
                    if parts[i] in SUFFIXES and parts[i + 1][:1] == MATRIX_EVENT_SIGIL), None)
        if cut is not None:
            parts = [*parts[:4], ":".join(parts[4:cut]), parts[cut], ":".join(parts[cut + 1:])]
        else:
            suffixed = len(parts) >= 7 and parts[-2] in SUFFIXES  # "@ada:example.org" or a bare "@"
            peer = ":".join(parts[4:-2] if suffixed else parts[4:])
            parts = [*parts[:4], peer, *(parts[-2:] if suffixed else [])]
    if len(parts) not in (5, 7):
        raise SessionKeyError(
            f"session key {text!r} has {len(parts)} parts; expected "
            "agent:<agentId>:<provider>:<kind>:<peer> with an optional :thread:<id> or :topic:<id>"
        )
    if parts[0] != "agent":
        raise SessionKeyError(f"session key {text!r} must start with 'agent:'")
    kind = _KIND_ALIASES.get(parts[3], parts[3])
    if kind not in KINDS:
        raise SessionKeyError(
            f"session key {text!r} has unknown kind {parts[3]!r}; expected direct, group, channel or room"
        )
    if len(parts) == 5:
        return SessionKey(parts[1], parts[2], kind, parts[4])
    if parts[5] not in SUFFIXES:
        raise SessionKeyError(
            f"session key {text!r} has unknown suffix {parts[5]!r}; expected thread or topic"
        )
    return SessionKey(parts[1], parts[2], kind, parts[4], parts[5], parts[6])
