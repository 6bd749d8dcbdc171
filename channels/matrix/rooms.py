"""The rooms the Matrix bot is in, as far as replies need them: whether a room is a direct chat
(the bot and exactly one other person, counting those invited), and which room is a person's
direct chat with the bot (a scheduled job's `deliver_to = "matrix:@user:server"`)."""

from __future__ import annotations

from mautrix.client import ClientAPI
from mautrix.errors import MatrixRequestError, MForbidden, MNotFound
from mautrix.types import Membership, RoomID, UserID

from bot.core.errors import DeliveryError


class RoomDirectory:
    """Member counts asked once per room and kept until a membership in it changes (`forget`);
    a person's direct room, learnt from their messages or looked up among the joined rooms."""

    def __init__(self) -> None:
        self._members: dict[str, int] = {}
        self._direct: dict[str, str] = {}

    def forget(self, room_id: str) -> None:
        """A membership in the room changed: count again next time."""
        self._members.pop(room_id, None)

    def left(self, room_id: str) -> None:
        """The bot left the room: nothing about it holds any longer."""
        self._members.pop(room_id, None)
        self._direct = {user: room for user, room in self._direct.items() if room != room_id}

    def note_direct(self, user_id: str, room_id: str) -> None:
        self._direct[user_id] = room_id

    async def is_direct(self, client: ClientAPI, room_id: str) -> bool:
        """Whether the room holds the bot and exactly one other person, counting those invited (a
        person invited may read the history once joined)."""
        count = self._members.get(room_id)
        if count is None:
            try:
                members = await client.get_members(RoomID(room_id), not_membership=Membership.LEAVE)
            except (MForbidden, MNotFound):  # the bot left since: the room's past events are a room's
                members = []
            present = (Membership.JOIN, Membership.INVITE)
            count = sum(1 for m in members if getattr(m.content, "membership", None) in present)
            self._members[room_id] = count
        return count == 2

    async def room_of(self, client: ClientAPI, chat_id: str) -> str:
        """The room to send to: `chat_id` itself, or for a person's id the room the bot shares
        with them alone."""
        if not chat_id.startswith("@"):
            return chat_id
        known = self._direct.get(chat_id)
        if known is not None:
            return known
        try:
            for room in await client.get_joined_rooms():
                if not await self.is_direct(client, room):
                    continue
                if UserID(chat_id) in await client.get_joined_members(room):
                    self._direct[chat_id] = str(room)
                    return str(room)
        except MatrixRequestError as exc:
            raise DeliveryError(f"Matrix did not list the bot's rooms: {exc}") from exc
        raise DeliveryError(f"no direct chat with {chat_id} on Matrix: they must invite the bot first",
                            permanent=True)
