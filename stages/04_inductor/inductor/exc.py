"""The one way inductor gives up: ``CompileError``.

Input: a reason in words a user understands. Output: an exception the driver catches to fall
back to eager (or re-raises under ``fullgraph=True`` / ``MINIPT2_STRICT=1``).

Chapter: book/docs/inductor.md ("When inductor gives up").
"""

from __future__ import annotations


class CompileError(RuntimeError):
    """Inductor could not compile a graph; the message says why (and cites a Note)."""
