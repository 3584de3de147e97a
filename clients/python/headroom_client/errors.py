"""HeadroomError: the one exception the client raises for a failed call."""


class HeadroomError(Exception):
    """A call to headroomd failed.

    `code` is the gRPC status code's name ("FAILED_PRECONDITION", "NOT_FOUND",
    "UNAVAILABLE", ...) and `message` the daemon's explanation, e.g. for Plan under too small
    a budget: FAILED_PRECONDITION with the smallest feasible budget in the message.
    """

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    @classmethod
    def from_rpc_error(cls, err):
        """Returns the HeadroomError for a grpc.RpcError (also a grpc.Call)."""
        code = err.code() if hasattr(err, "code") else None
        details = err.details() if hasattr(err, "details") else None
        return cls(code.name if code is not None else "UNKNOWN", details or str(err))
