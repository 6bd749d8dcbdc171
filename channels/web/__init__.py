"""The web chat: the console's accounts talking to the agent in the browser, as channel `web`.

`channel` is the Channel (intake of a posted message, access, replies and previews); `hub` carries
what the channel sends to the pages open for an account (server-sent events). The pages and the
HTTP routes are the console's (`bot.web.chat`), which imports this package, never the reverse.
"""
