"""The way in: the channel protocol every platform implements, and what happens to an inbound message.

Access and pairing decide who is heard, the inbox stores before anything else, the router runs
each session's queue in order under its lease, and chat commands are answered here.
"""
