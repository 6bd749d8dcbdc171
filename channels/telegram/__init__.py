"""Telegram through python-telegram-bot: durable intake (long polling or a webhook), normalising,
sending within the flood limits, previews, and probing a send in doubt.
"""
