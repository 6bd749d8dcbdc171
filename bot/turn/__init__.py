"""One turn run whole: context, the model's reply with its tool rounds, the store and the outbox row.

`runner` is the turn; `agents` builds one runner per configured agent; `tools` and `tool_loop` are
what a turn offers and how the model's tool calls are answered.
"""
