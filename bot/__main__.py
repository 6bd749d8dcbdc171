"""`python -m bot` runs the `switchboard` command."""

from bot.cli import main

main()
