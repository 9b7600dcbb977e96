"""The harness's one error type and its exit codes."""

# Bad input (a spec, setup or flag the harness cannot use): one
# {"event": "error"} line naming the field, and this exit code.
EXIT_BAD_INPUT = 2


class SpecError(ValueError):
    """A spec, setup or flag the harness cannot use; the message names it."""
