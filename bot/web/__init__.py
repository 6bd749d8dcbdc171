"""The browser console: an admin's view of the running daemon, served by it (`[web]`).

`server` runs the aiohttp app; `guard` is its door (login, sessions, CSRF, security headers);
`auth` checks passwords and keeps sessions in the store; `live` is the overview and its event
stream, `pages` the sessions and turns, `replay_page`, `usage_page` (with `charts`), `admin_pages`
(pairing, jobs, notes) and `config_page` the rest of what the admin commands show and do;
`running` is the daemon as they see it; `rendering` holds the Jinja2 templates (in `templates/`,
with the stylesheet and the overview's module in `static/`).
Only `bot.daemon.assembly` and `bot.cli` import this package.
"""
