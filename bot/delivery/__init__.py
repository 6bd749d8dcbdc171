"""The way out: a stored reply sent chunk by chunk through the outbox, previews while it is written,
and what a start resumes. A send in doubt is probed before it is sent again.
"""
