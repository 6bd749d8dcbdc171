"""Streams on the Slack stand-in: chat.startStream in a thread, naming the recipient and their team,
chat.appendStream and chat.stopStream growing that one message, and an assistant thread's status.
An open stream cannot be edited; a stopped or ended one answers `message_not_in_streaming_state`.
A stream is shown as blocks: chat.update keeps them unless it is given `blocks` (`[]` removes them),
as Slack does, so `shown()` is what a person reads."""

from __future__ import annotations

from bot.testing.slack_values import Json, Timestamps, UpdatedMessage, stream_text


class SlackStreams:
    """The streaming half of `SlackStandIn`."""

    bot_token: str
    team_id: str
    bot_user_id: str
    bot_id: str
    app_id: str
    history: dict[str, list[Json]]
    _ts: Timestamps

    def __init__(self) -> None:
        self.streamed: list[UpdatedMessage] = []  # a stream's text after each start, append and stop
        self._open_streams: set[tuple[str, str]] = set()  # (channel, ts) of streams not stopped

    def _find(self, channel: str, ts: str) -> Json | None:
        return next((m for m in self.history.get(channel, []) if m["ts"] == ts), None)

    def _chat_startStream(self, args: Json) -> Json:
        channel, thread_ts = str(args.get("channel", "")), str(args.get("thread_ts", ""))
        if channel not in self.history:
            return {"ok": False, "error": "channel_not_found"}
        if self._find(channel, thread_ts) is None:
            return {"ok": False, "error": "thread_not_found"}
        # A stream answers someone: Slack wants them named (in practice in DMs too).
        if not args.get("recipient_user_id") or not args.get("recipient_team_id"):
            return {"ok": False, "error": "invalid_arguments"}
        text = stream_text(args)
        if text is None:
            return {"ok": False, "error": "msg_too_long"}
        ts = self._ts.next(channel)
        message: Json = {"type": "message", "user": self.bot_user_id, "bot_id": self.bot_id,
                         "app_id": self.app_id, "text": text, "ts": ts, "team": self.team_id,
                         "thread_ts": thread_ts, "blocks": [{"type": "markdown", "text": text}]}
        self.history[channel].append(message)
        self._open_streams.add((channel, ts))
        self.streamed.append(UpdatedMessage(channel, ts, text))
        return {"ok": True, "channel": channel, "ts": ts}

    def _chat_appendStream(self, args: Json) -> Json:
        return self._grow_stream(args, stop=False)

    def _chat_stopStream(self, args: Json) -> Json:
        return self._grow_stream(args, stop=True)

    def _grow_stream(self, args: Json, *, stop: bool) -> Json:
        channel, ts = str(args.get("channel", "")), str(args.get("ts", ""))
        found = self._find(channel, ts)
        if found is None:
            return {"ok": False, "error": "message_not_found"}
        if (channel, ts) not in self._open_streams:
            return {"ok": False, "error": "message_not_in_streaming_state"}
        text = stream_text(args)
        if text is None:
            return {"ok": False, "error": "msg_too_long"}
        if not stop and not text:
            return {"ok": False, "error": "invalid_arguments"}  # markdown_text (or chunks) required
        found["text"] += text
        found["blocks"] = [{"type": "markdown", "text": found["text"]}]  # what Slack shows of it
        if stop:
            self._open_streams.discard((channel, ts))
        self.streamed.append(UpdatedMessage(channel, ts, found["text"]))
        return {"ok": True, "channel": channel, "ts": ts}

    def end_streams(self) -> None:
        """Slack ends every open stream (as it does about 5 minutes after one started)."""
        self._open_streams.clear()

    def _assistant_threads_setStatus(self, args: Json) -> Json:
        channel = str(args.get("channel_id", ""))
        if not channel.startswith("D") or self._find(channel, str(args.get("thread_ts", ""))) is None:
            return {"ok": False, "error": "channel_not_found"}
        if "status" not in args:
            return {"ok": False, "error": "invalid_arguments"}
        return {"ok": True}
