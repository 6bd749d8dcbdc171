"""The test kit: local stand-ins of the platforms and model APIs, for people who extend Switchboard.

Each stand-in is a real HTTP (and websocket) server on 127.0.0.1 that speaks the wire protocol to the
real client library, so a test drives a channel or a provider as production does, minus the network:
`telegram_api.TelegramStandIn` (the Bot API, for python-telegram-bot; webhooks too),
`discord_api.DiscordStandIn` (gateway and REST v10, for discord.py, pointed there with `patch`),
`slack_api.SlackStandIn` (the Web API and Socket Mode, for slack_sdk and slack-bolt: `base_url`),
`anthropic_api.AnthropicStandIn` (Messages and Models API, with the prompt cache metered as billed)
and `openai_api.OpenAIStandIn` (an OpenAI-compatible chat completions and transcriptions server).
Each is an async context manager; a test scripts answers and faults, then reads what was sent.
In-process fakes complete it: `fake_channel.FakeChannel` (a channel the test types into),
`recording_intake.RecordingIntake` (the core as a channel adapter sees it), `models` (the made-up
model names and the `echo` answer), `postgres.PostgresServer` (a throwaway PostgreSQL server),
`synapse.SynapseServer` (a real Matrix homeserver, Synapse from its own cached virtualenv) with
`matrix_user.MatrixUser` (a person on it, speaking the client-server API),
`mcp_calc` (an MCP server over stdio, written with the SDK, whose tools answer, fail, crash, hang
and grow; `server_entry` is its `[[mcp_servers]]` table), and `preloaded.Preloaded` (`switchboard`
commands forked from a Python that imported their modules once, for tests that start a daemon again
and again).

Nothing in the product imports this package (an import-linter contract says so), and it needs no
pytest: the suite, the benches and docs/development.md's example all use it the same way.
"""
