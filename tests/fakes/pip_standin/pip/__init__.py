"""Stand-in for pip, for tests that must see whether (and how often) a role runs ``python -m pip``."""
