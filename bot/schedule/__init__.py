"""Work that runs on time: briefings from config.toml and the reminders users set.

APScheduler fires them; each firing is a schedule run that is claimed, generated once, stored and
delivered at most once. Their output stays out of chat context.
"""
