"""Local stand-ins of the external services Switchboard talks to, for tests."""
