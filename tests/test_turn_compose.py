"""The compose phase: the context built and the reply call assembled, with fakes of what it asks."""

from __future__ import annotations

from typing import Any

from structlog.testing import capture_logs

from bot.config import Config
from bot.core.media import MAX_INLINE_BYTES
from bot.core.messages import ChatRef, InboundMessage, StoredMessage
from bot.core.session_key import SessionKey
from bot.ranking.stages import Context
from bot.store import TurnOpening
from bot.turn.compose import Composer
from tests.turn_fakes import FakeBrain, FakeLoop, completion, context, inbound, request


class Contexts:
    def __init__(self, built: Context | Exception) -> None:
        self.built = built

    async def build(self, key: SessionKey, request: StoredMessage, chat: ChatRef | None = None) -> Context:
        if isinstance(self.built, Exception):
            raise self.built
        return self.built


class Models:
    def __init__(self, chosen: str | Exception | None = None) -> None:
        self.chosen = chosen

    async def session_model(self, session_key: str) -> str | None:
        if isinstance(self.chosen, Exception):
            raise self.chosen
        return self.chosen


class Prompt:
    def stable_prompt(self) -> str:
        return "You are Switchboard.\n\n<soul>kind</soul>"

    def included(self) -> list[dict[str, Any]]:
        return [{"name": "soul", "file": "/srv/SOUL.md", "chars": 4, "left_out": False}]


class Files:
    def __init__(self, kept: dict[str, bytes] | None = None) -> None:
        self.kept = kept or {}

    async def read(self, sha256: str) -> bytes | None:
        return self.kept.get(sha256)


class Aids:
    def __init__(
        self, *, loop: FakeLoop | None = None, notes: list[tuple[str, str]] | Exception = ()
    ) -> None:
        self._loop = loop
        self._notes = notes

    async def user_zone(self, inbound: InboundMessage, opening: TurnOpening | None = None) -> str | None:
        return None

    async def loop(
        self, inbound: InboundMessage, request: StoredMessage, zone: str | None,
        opening: TurnOpening | None = None,
    ) -> FakeLoop | None:
        return self._loop

    async def notes(
        self, inbound: InboundMessage, zone: str | None, opening: TurnOpening | None = None
    ) -> list[tuple[str, str]]:
        if isinstance(self._notes, Exception):
            raise self._notes
        return list(self._notes)


def composer(
    config: Config, *, built: Context | Exception | None = None, chosen: str | Exception | None = None,
    aids: Aids | None = None, files: Files | None = None,
) -> Composer:
    return Composer(config, Contexts(built if built is not None else context("earlier", "answer")),
                    Models(chosen), FakeBrain(completion()), Prompt(), files or Files(), aids or Aids())


async def test_a_turn_composes_its_reply_call_from_the_context_and_the_prompt(make_config: Any) -> None:
    """The call holds the stable prompt, the per-turn part with the asker's notes, the context's
    turns and the session's model; the parts and prompt files are kept for the snapshot."""
    aids = Aids(notes=[("notes of fake:42 (1, remember)", "Likes tea.")])
    composed = await composer(make_config(), aids=aids)(request(), inbound(), 0.0)

    assert composed.call is not None and composed.error is None
    assert composed.call.system_stable == "You are Switchboard.\n\n<soul>kind</soul>"
    assert composed.call.system_turn.startswith("This conversation is ")
    assert composed.call.system_turn.endswith("\n\nLikes tea.")
    assert [turn["role"] for turn in composed.call.messages] == ["user", "assistant", "user"]
    assert composed.call.model == composed.model == "claude-main"
    assert [label for label, _ in composed.turn_parts] == [
        "where and when (this chat, the time)", "notes of fake:42 (1, remember)"]
    assert composed.prompt_files == ({"name": "soul", "file": "/srv/SOUL.md", "chars": 4, "left_out": False},)
    assert composed.placeholders is None and composed.without_files() is None
    assert composed.context_ms >= 0 and composed.session_key == str(inbound().session_key)


async def test_tools_offered_add_their_definitions_to_the_prompt_parts(make_config: Any) -> None:
    """A turn with tools hands the loop on and counts its definitions as a part of the prompt."""
    loop = FakeLoop(completion())
    composed = await composer(make_config(), aids=Aids(loop=loop))(request(), inbound(), 0.0)

    assert composed.loop is loop
    assert composed.turn_parts[-1] == ("tool definitions (2 offered)", 321)


async def test_the_session_model_is_its_allowed_choice_else_the_main_role(make_config: Any) -> None:
    """A /model choice still in [anthropic].models is used; an unknown one, or none readable, gives
    the main role's model."""
    config = make_config({"anthropic": {"models": {"quick": "claude-quick"}}})

    assert await composer(config, chosen="quick").session_model("k") == "claude-quick"
    assert await composer(config, chosen="gone").session_model("k") == "claude-main"
    with capture_logs() as logs:
        assert await composer(config, chosen=OSError("locked")).session_model("k") == "claude-main"
    assert [e["event"] for e in logs] == ["session model unreadable"]


async def test_the_turns_opening_read_answers_for_the_session_model(make_config: Any) -> None:
    """With the turn's opening read, its model choice is used without reading the store again,
    and a compaction it found untold (or none) is what commit is told to look for."""
    config = make_config({"anthropic": {"models": {"quick": "claude-quick"}}})
    opening = TurnOpening("quick", None, False, False, None)
    unreadable = composer(config, chosen=OSError("not to be read"))

    composed = await unreadable(request(), inbound(), 0.0, opening)
    assert composed.model == "claude-quick" and not composed.notice_due
    untold = await unreadable(request(), inbound(), 0.0, TurnOpening(None, None, False, True, None))
    assert untold.model == "claude-main" and untold.notice_due


async def test_a_context_that_cannot_be_built_composes_no_call(make_config: Any) -> None:
    """The failure is logged and kept as the error; the turn goes on without a reply call."""
    with capture_logs() as logs:
        composed = await composer(make_config(), built=RuntimeError("disk gone"))(request(), inbound(), 0.0)

    assert composed.call is None and composed.context.status == "failed"
    assert composed.error == "context_build_error: RuntimeError: disk gone"
    assert [e["event"] for e in logs] == ["context build failed"]


async def test_a_prompt_that_cannot_be_assembled_composes_no_call(make_config: Any) -> None:
    """A failure after the context (the notes, the files) keeps the context and says why there is no call."""
    with capture_logs() as logs:
        composed = await composer(make_config(), aids=Aids(notes=KeyError("zone")))(request(), inbound(), 0.0)

    assert composed.call is None and composed.context.status == "ok"
    assert composed.error == "KeyError: 'zone'"
    assert [e["event"] for e in logs] == ["reply prompt not assembled"]


async def test_kept_files_are_read_newest_first_up_to_the_inline_cap(make_config: Any) -> None:
    """A file gone from disk, or one past MAX_INLINE_BYTES in total, is left to its placeholder."""
    big = b"x" * (MAX_INLINE_BYTES - 10)
    files = Files({"new": big, "old": b"y" * 20, "small": b"z" * 5})
    with capture_logs() as logs:
        read = await composer(make_config(), files=files).read_files(["new", "gone", "old", "small"])

    assert read == {"new": big, "small": b"z" * 5}
    assert [e["event"] for e in logs] == ["a kept file is missing; the model sees its placeholder"]
