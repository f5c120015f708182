"""The error types library code raises; only the CLI turns them into one line and an exit code."""


class BertctlError(Exception):
    """A failure the user can act on (exit code 1): the message names the file or flag and what to do."""

    exit_code = 1


class UsageError(BertctlError):
    """A mistake in how bertctl was called: a bad flag value, a missing or wrong input (exit code 2)."""

    exit_code = 2
