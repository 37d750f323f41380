"""The one way stage 2 gives up.

Input: a reason, in words a user understands.
Output: ``AOTUnsupported``, which callers (the driver) catch to fall back to eager.

Chapter: book/docs/aotautograd.md ("What the tracer cannot do yet").
"""


class AOTUnsupported(Exception):
    """aotautograd cannot trace or compile this program (yet); run it eagerly instead."""
