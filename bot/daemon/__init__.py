"""The daemon: everything assembled, run together, reloaded and stopped cleanly.

The store, the models, the router and the channels (`assembly`), the channels' supervision, the
control socket that `status` and `reload` reach, systemd notifications and the store's upkeep.
"""
