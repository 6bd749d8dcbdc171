"""The browser console: an admin's view of the running daemon, served by it (`[web]`).

`server` runs the aiohttp app; `guard` is its door (login, sessions, CSRF, security headers);
`auth` checks passwords and keeps sessions in the store; `pages` renders what the admin commands
show; `rendering` holds the Jinja2 templates (in `templates/`, with one stylesheet in `static/`).
Only `bot.daemon` and `bot.cli` import this package.
"""
