"""ConfigError, in a module of its own so that every schema file (schema.py, augment.py) can raise it."""


class ConfigError(ValueError):
    """A user mistake in a config or command line: reported as one line, exit status 2."""
