"""`switchboard run` in a child process with discord.py pointed at a local Discord stand-in.

Usage: python -m bot.testing.daemon_child --config PATH   (from the repository root, or with it on PYTHONPATH)

discord.py has no base-URL option, so a daemon run as a subprocess against the stand-in needs these
two class attributes set before it starts; everything after that is the real `switchboard run`.
Environment: SWITCHBOARD_DISCORD_BASE (`http://127.0.0.1:PORT`, the REST API lives under /api/v10)
and SWITCHBOARD_DISCORD_GATEWAY (`ws://127.0.0.1:PORT/gateway`). Without them nothing is patched.
"""

from __future__ import annotations

import os
import sys
import warnings


def point_discord_at_standin() -> None:
    base, gateway = os.environ.get("SWITCHBOARD_DISCORD_BASE"), os.environ.get("SWITCHBOARD_DISCORD_GATEWAY")
    if not base or not gateway:
        return
    import yarl

    with warnings.catch_warnings():
        # discord.py imports the stdlib audioop (deprecated since 3.11) for voice, which we never use.
        warnings.simplefilter("ignore", DeprecationWarning)
        import discord

    discord.http.Route.BASE = f"{base}/api/v10"
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway)


if __name__ == "__main__":
    point_discord_at_standin()
    from bot.cli import main

    main(["run", *sys.argv[1:]])
