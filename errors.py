"""The root of every error dms-gateway raises on purpose.

Callers (the CLI, the HTTP layer, a REPL user) catch :class:`DmsgwError` to tell a clear,
expected failure from a bug: the former is shown as a one-line reason, the latter as a traceback.
"""


class DmsgwError(Exception):
    """An expected failure whose message names what was wrong."""
