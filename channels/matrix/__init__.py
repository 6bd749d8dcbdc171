"""Matrix: a bot account on a homeserver, through mautrix-python's client API (imported only when a
Matrix channel is configured); see `channels.matrix.channel`."""
