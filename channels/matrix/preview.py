"""Matrix reply previews: one message posted at the first sentence and edited (`m.replace`) as the
reply grows; the outbox's final edit carries the whole text (`m.new_content`) and the message
becomes the reply's first chunk.

An edit is an event, counted by the homeserver's message rate limit like any other, so previews
are paced (`EDIT_INTERVAL`) and best effort: a 429 on a preview's request is not waited out
(`rate_limit.best_effort`), that update is skipped and a later one tried. The final edit is the
outbox's, sent with a transaction id derived from the reply, so a resend of chunk 0 is no second
edit.
"""

from __future__ import annotations

from collections.abc import Callable

from mautrix.client import ClientAPI
from mautrix.errors import MLimitExceeded
from mautrix.types import EventID, EventType, RoomID

from bot.delivery.preview import PreviewSkipped, has_first_sentence
from channels.matrix.format import edit_content, matrix_chunks, message_content
from channels.matrix.rate_limit import best_effort

# Synapse's default message budget is a burst of 10 and 0.2/s after it; an edit every 1.5 s
# stays readable and keeps a long reply's preview from spending the burst on the first seconds.
EDIT_INTERVAL = 1.5
# A reply complete within this gains nothing from a message posted early.
EDIT_START_AFTER = 1.0


class MatrixPreview:
    """The preview surface of one reply in one room (see `bot.delivery.preview.PreviewStream`)."""

    def __init__(
        self, client_of: Callable[[], ClientAPI], room_id: str, *, thread_root: str | None,
        reply_to_id: str | None, resume_id: str | None,
    ) -> None:
        self._client_of = client_of  # raises DeliveryError while Matrix is not connected
        self._room = RoomID(room_id)
        self._thread_root = thread_root
        self._reply_to_id = reply_to_id
        # A message an interrupted turn left half-written is edited, never left behind.
        self._event_id = resume_id
        self._shown: str | None = None

    @property
    def interval(self) -> float:
        return EDIT_INTERVAL

    def ready(self, text: str, elapsed: float) -> bool:
        return elapsed >= EDIT_START_AFTER and has_first_sentence(text)

    async def show(self, text: str) -> str | None:
        chunk = (matrix_chunks(text) or [text])[0]
        if chunk == self._shown:
            return None  # the reply grew past the first message: its preview is complete
        client = self._client_of()
        posted = None
        token = best_effort.set(True)
        try:
            if self._event_id is None:
                content = message_content(chunk, thread_root=self._thread_root, reply_to=self._reply_to_id)
                self._event_id = posted = str(await client.send_message_event(
                    self._room, EventType.ROOM_MESSAGE, content))  # type: ignore[arg-type]
            else:
                await client.send_message_event(self._room, EventType.ROOM_MESSAGE,
                                                edit_content(self._event_id, chunk))  # type: ignore[arg-type]
        except MLimitExceeded as exc:
            raise PreviewSkipped("Matrix rate limit: preview update skipped") from exc
        finally:
            best_effort.reset(token)
        self._shown = chunk
        return posted

    async def close(self, final: str) -> str | None:
        return self._event_id

    async def withdraw(self) -> None:
        if self._event_id is not None:
            await self._client_of().redact(self._room, EventID(self._event_id), reason="reply withdrawn")
            self._event_id = None

