"""The one exception every call of headroom_client raises."""


class HeadroomError(Exception):
    """A call that failed, or a request refused before it was sent.

    `code` is the gRPC status name: "NOT_FOUND" (an unknown template),
    "INVALID_ARGUMENT" (a bad keyword, word, number or file, named in the
    message with what is allowed), "UNAVAILABLE" when the planner cannot be
    reached, "DEADLINE_EXCEEDED" past the deadline, "PERMISSION_DENIED" for
    a token without the role. `message` is the reason, without the code.
    """

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def invalid(message: str) -> HeadroomError:
    """INVALID_ARGUMENT with `message`, which names the argument and what is
    allowed."""
    return HeadroomError("INVALID_ARGUMENT", message)
