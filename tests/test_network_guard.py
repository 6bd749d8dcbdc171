"""The test suite's own guard: nothing in the tests may reach a non-local host."""

from __future__ import annotations

import asyncio
import socket

import pytest


def test_blocking_connect_to_a_remote_address_fails_before_any_packet() -> None:
    """A plain socket connect to a non-loopback address fails the test at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock, pytest.raises(
        AssertionError, match="non-local host"
    ):
        sock.connect(("192.0.2.1", 443))  # TEST-NET-1: documentation only, never sent


async def test_asyncio_connection_to_a_remote_address_fails() -> None:
    """asyncio's connections (used by aiohttp, httpx and the SDKs) go through the same guard."""
    with pytest.raises(AssertionError, match="non-local host"):
        await asyncio.open_connection("192.0.2.1", 443)


async def test_loopback_connections_still_work() -> None:
    """Local stand-ins on 127.0.0.1 stay reachable."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"ping\n")
        assert await reader.readline() == b"ping\n"
        writer.close()
        await writer.wait_closed()
