"""User-facing errors.

A `UserError` is a mistake the user can fix (bad path, unknown name, malformed file). The CLI prints
its message on one line and exits with status 2, without a traceback. Anything else is a bug and keeps
its traceback.
"""


class UserError(Exception):
    """A problem in the user's input; the message names the problem and the fix."""
