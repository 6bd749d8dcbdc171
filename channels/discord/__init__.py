"""Discord through discord.py: the gateway client, normalising and gating messages, previews,
attachments, and catching up on what arrived while no gateway session listened.
"""
