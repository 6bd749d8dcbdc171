"""Matrix's pure parts: events read into our shape, who is let in, session keys with Matrix ids,
reply contents and transaction ids."""

from __future__ import annotations

from typing import Any

import pytest

from bot.config import MatrixConfig
from bot.core.errors import ConfigError
from bot.core.messages import ChatRef
from bot.core.session_key import build, parse
from channels.matrix.format import message_content, transaction_id
from channels.matrix.normalise import admit, admit_invite, read_event, to_inbound

BOT, ADA, EVE = "@bot:example.org", "@ada:example.org", "@eve:example.org"
ROOM = "!room:example.org:8448"


def event(body: str, **content: Any) -> dict[str, Any]:
    return {"type": "m.room.message", "event_id": "$ev1", "sender": ADA,
            "origin_server_ts": 1_700_000_000_000, "content": {"msgtype": "m.text", "body": body, **content}}


@pytest.mark.parametrize("text", [
    f"agent:main:matrix:direct:{ADA}",
    f"agent:main:matrix:room:{ROOM}",
    f"agent:main:matrix:room:{ROOM}:thread:$root",
    f"agent:main:matrix:direct:{ADA}:thread:$root",
    f"agent:main:matrix:room:{ROOM}:thread:$root:example.org",
    f"agent:main:matrix:direct:{ADA}:thread:$root:example.org:8448",
])
def test_matrix_keys_keep_the_colons_of_their_ids(text: str) -> None:
    """A Matrix id is one peer, colons and port included; the thread suffix is found after it,
    its root's event id whole (`$id:server` in rooms of versions 1 and 2)."""
    key = parse(text)
    assert str(key) == text
    assert key.peer in (ADA, ROOM)
    assert key.suffix_id == (text.partition(":thread:")[2] or None)
    assert parse(str(key.base())).peer == key.peer


def test_only_a_matrix_peer_may_have_colons() -> None:
    """Other platforms' peers still refuse a colon (their keys would not parse back)."""
    key = build("main", "matrix", "room", ROOM, thread="$x")
    assert str(key) == f"agent:main:matrix:room:{ROOM}:thread:$x"
    with pytest.raises(ValueError, match="must not contain ':'"):
        build("main", "telegram", "group", "12:34")
    with pytest.raises(ValueError, match="must not contain ':'"):
        build("main", "discord", "channel", "5", thread="$root:example.org")
    with pytest.raises(ValueError, match="6 parts"):
        parse("agent:main:telegram:direct:42:extra")


def test_a_thread_message_is_read_with_its_root_and_no_fallback_reply() -> None:
    """An `m.thread` relation gives the root; its fallback `m.in_reply_to` is not a reply."""
    msg = read_event(event("tea?", **{"m.relates_to": {
        "rel_type": "m.thread", "event_id": "$root", "is_falling_back": True,
        "m.in_reply_to": {"event_id": "$latest"}}}), ROOM, direct=False)
    assert msg is not None
    assert (msg.thread_root, msg.reply_to, msg.sent_at) == ("$root", None, 1_700_000_000.0)


def test_a_reply_loses_its_quoted_fallback_and_edits_are_not_taken() -> None:
    """The `> <@x> quoted` lines older clients put before a reply are not the message; an edit
    (`m.replace`) and a non-text event are not read."""
    msg = read_event(event("> <@eve:example.org> hi\n> there\n\nhello", **{
        "m.relates_to": {"m.in_reply_to": {"event_id": "$q"}}}), ROOM, direct=False)
    assert msg is not None and (msg.body, msg.reply_to) == ("hello", "$q")
    assert read_event(event("* fixed", **{"m.relates_to": {"rel_type": "m.replace", "event_id": "$q"}}),
                      ROOM, direct=False) is None
    assert read_event(event("pic.png", msgtype="m.image"), ROOM, direct=False) is None


def test_room_messages_start_a_turn_on_a_mention_only() -> None:
    """Chatter is stored without a turn; the bot's id, its display name as a word, or
    `m.mentions` start one; an `m.notice` never does."""
    config = MatrixConfig(allow_from=[ADA])

    def starts(body: str, **content: Any) -> bool:
        msg = read_event(event(body, **content), ROOM, direct=False)
        assert msg is not None and admit(msg, config, bot_user_id=BOT) == "accept"
        inbound = to_inbound(msg, agent_id="main", bot_user_id=BOT, display_name="Switchboard",
                             config=config, sender_name="Ada")
        assert inbound is not None and str(inbound.session_key) == f"agent:main:matrix:room:{ROOM}"
        return inbound.starts_turn

    assert not starts("just chatting")
    assert not starts("switchboards are old tech")
    assert starts("switchboard, what time is it?")
    assert starts(f"{BOT}: hi")
    assert starts("hi", **{"m.mentions": {"user_ids": [BOT]}})
    assert not starts("Switchboard: a bot's notice", msgtype="m.notice")


def test_invites_follow_the_policies() -> None:
    """allowlist: allowed users and admins; pairing lets a stranger open a direct chat only;
    open: anyone; disabled: no one."""
    config = MatrixConfig(allow_from=[ADA], admins=["@root:example.org"])
    assert admit_invite(ADA, config, direct=False) and admit_invite("@root:example.org", config, direct=True)
    assert not admit_invite(EVE, config, direct=True)
    pairing = config.model_copy(update={"dm_policy": "pairing"})
    assert admit_invite(EVE, pairing, direct=True) and not admit_invite(EVE, pairing, direct=False)
    assert admit_invite(EVE, config.model_copy(update={"invite_policy": "open"}), direct=False)
    assert not admit_invite(ADA, config.model_copy(update={"invite_policy": "disabled"}), direct=True)


def test_a_direct_stranger_is_refused_or_paired() -> None:
    msg = read_event({**event("hi"), "sender": EVE}, ROOM, direct=True)
    assert msg is not None
    assert admit(msg, MatrixConfig(allow_from=[ADA]), bot_user_id=BOT) == "refuse"
    assert admit(msg, MatrixConfig(dm_policy="pairing"), bot_user_id=BOT) == "pair"


def test_a_reply_in_a_thread_is_html_beside_markdown_and_mentions_nobody() -> None:
    content = message_content("**hi** <b>@room</b>", thread_root="$root", reply_to="$asked")
    assert content["body"] == "**hi** <b>@room</b>"
    assert content["formatted_body"] == "<p><strong>hi</strong> &lt;b&gt;@room&lt;/b&gt;</p>"
    assert content["m.mentions"] == {}
    assert content["m.relates_to"] == {"rel_type": "m.thread", "event_id": "$root",
                                       "is_falling_back": False, "m.in_reply_to": {"event_id": "$asked"}}


def test_transaction_ids_repeat_for_the_same_chunk_only() -> None:
    same = transaction_id("sb7", ROOM, 0, "text")
    assert same == transaction_id("sb7", ROOM, 0, "text")
    assert len({same, transaction_id("sb7", ROOM, 1, "text"), transaction_id("sb8", ROOM, 0, "text"),
                transaction_id("sb7", ROOM, 0, "other"), transaction_id(None, ROOM, 0, "text")}) == 5


def test_an_enabled_account_needs_its_homeserver_and_id(
    make_config: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`run` refuses an enabled Matrix section without homeserver or user_id, naming the key."""
    from bot.config.root import check_startable

    monkeypatch.setenv("MATRIX_ACCESS_TOKEN", "syt_x")
    config = make_config({"channels": {"matrix": {"enabled": True, "user_id": BOT}}})
    with pytest.raises(ConfigError, match=r"channels\.matrix\.homeserver"):
        check_startable(config)
    with pytest.raises(ConfigError, match="a Matrix id as the key"):
        make_config({"channels": {"matrix": {"dms": {"ada": {"history_limit": 3}}}}})


def test_a_job_delivers_to_a_matrix_room_or_person() -> None:
    """`matrix:!room:server` is a room, `matrix:@user:server` a person's direct chat; anything else
    is refused, naming what was expected."""
    from bot.config.schedule_spec import delivery_key
    from bot.schedule.triggers import delivery_chat

    assert str(delivery_key("matrix:!abc:example.org", "main")) == "agent:main:matrix:room:!abc:example.org"
    assert str(delivery_key(f"matrix.work:{ADA}", "main")) == f"agent:main:matrix.work:direct:{ADA}"
    threaded = delivery_key(f"agent:main:matrix:room:{ROOM}:thread:$root", "main")
    assert delivery_chat(threaded) == ChatRef("matrix", ROOM, "$root")
    for wrong in ("matrix:ada", f"agent:main:matrix:channel:{ROOM}", f"agent:main:matrix:room:{ADA}"):
        with pytest.raises(ValueError, match="a room by its id"):
            delivery_key(wrong, "main")


def test_pairing_commands_take_a_matrix_user() -> None:
    """`switchboard pairing approve --user matrix:@ada:example.org`; a bare name is refused."""
    from bot.cli.access import _user
    from bot.cli.base import UsageError

    assert _user(f"matrix:{ADA}", ["matrix", "telegram"]) == ("matrix", ADA)
    assert _user(f"matrix.work:{ADA}", ["matrix.work"]) == ("matrix.work", ADA)
    with pytest.raises(UsageError, match="PROVIDER:ID"):
        _user("matrix:ada", ["matrix"])


def test_bindings_name_matrix_rooms_and_people(make_config: Any) -> None:
    """`[[bindings]]` take a room id as `chat` and a person's id as `user` (or `chat`: their
    direct chats), routed as on the other platforms."""
    config = make_config({
        "agents": [{"id": "tea"}, {"id": "ada"}],
        "bindings": [{"agent": "tea", "channel": "matrix", "chat": ROOM},
                     {"agent": "ada", "user": ADA}],
    })
    routing = config.routing()
    assert routing.agent_for("matrix", (ROOM, None, ROOM), EVE) == "tea"
    assert routing.agent_for("matrix", (ADA, None, "!other:example.org"), ADA) == "ada"
    assert routing.agent_for("matrix", ("!other:example.org", None, "!other:example.org"), EVE) == "main"


def test_a_file_message_carries_its_mxc_url_and_a_caption_only_beside_a_filename() -> None:
    """`m.image` with `filename`: its body is a caption; without, the body is only the file's name
    (no text); a voice message (MSC3245) is a voice note, its duration in seconds; an encrypted
    file (`file`, no `url`) or another msgtype is no file."""
    info = {"mimetype": "image/PNG", "size": 2048, "w": 800, "h": 600}
    captioned = read_event(event("what is this?", msgtype="m.image", url="mxc://hs/abc",
                                 filename="fridge.png", info=info), ROOM, direct=True)
    assert captioned is not None and captioned.file is not None
    assert captioned.body == "what is this?"
    assert (captioned.file.kind, captioned.file.url, captioned.file.name, captioned.file.mime,
            captioned.file.size, captioned.file.width) == ("photo", "mxc://hs/abc", "fridge.png",
                                                          "image/png", 2048, 800)
    bare = read_event(event("notes.txt", msgtype="m.file", url="mxc://hs/n"), ROOM, direct=True)
    assert bare is not None and bare.file is not None
    assert (bare.body, bare.file.kind, bare.file.name) == ("", "document", "notes.txt")
    voice = read_event(event("Voice message", msgtype="m.audio", url="mxc://hs/v",
                             info={"duration": 42_300}, **{"org.matrix.msc3245.voice": {}}),
                       ROOM, direct=True)
    assert voice is not None and voice.file is not None
    assert (voice.file.kind, voice.file.duration) == ("voice", 42)
    assert read_event(event("secret.png", msgtype="m.image", file={"url": "mxc://hs/e"}), ROOM,
                      direct=True) is None
    assert read_event(event("here", msgtype="m.location", geo_uri="geo:0,0"), ROOM, direct=True) is None
    config = MatrixConfig(allow_from=[ADA])
    inbound = to_inbound(bare, agent_id="main", bot_user_id=BOT, display_name="bot", config=config,
                         sender_name="ada")
    assert inbound is not None and inbound.text == "" and inbound.starts_turn
