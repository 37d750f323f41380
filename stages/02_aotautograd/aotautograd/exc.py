"""The one way stage 2 gives up.

Input: a reason, in words a user understands.
Output: ``AOTUnsupported``, which callers (the driver) catch to fall back to eager.

Chapter: book/docs/aotautograd.md ("What the tracer cannot do yet").
"""


class AOTUnsupported(Exception):
    """aotautograd cannot trace or compile this program (yet); run it eagerly instead.

    ``eager_ops``: qualified names of custom ops (``"ns::name"``) that made the trace fail
    and that a graph capturer may keep out of its graphs before trying again ([Note: an op
    whose backward cannot be traced] in joint.py)."""

    def __init__(self, message: str, eager_ops: frozenset[str] = frozenset()) -> None:
        super().__init__(message)
        self.eager_ops = eager_ops
