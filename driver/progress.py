"""A one-line progress display for long compiles, on a terminal only.

Input: messages on the ``minipt2.progress`` logger, from any stage (inductor reports
"kernel 3 of 12"); the driver reports which graph it is compiling.
Output: one line on stderr, rewritten in place (``\\r``) while compiling and erased when done.
Nothing at all when stderr is not a terminal (CI logs, pipes) or with ``MINIPT2_PROGRESS=0``.

Chapter: book/docs/driver.md ("Logs").
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator

logger = logging.getLogger("minipt2.progress")


class _LineHandler(logging.Handler):
    """Draws each record over the previous one."""

    width = 0

    def emit(self, record: logging.LogRecord) -> None:
        text = f"[minipt2] {record.getMessage()}"[:100]
        sys.stderr.write("\r" + text.ljust(self.width))
        sys.stderr.flush()
        self.width = len(text)

    def clear(self) -> None:
        if self.width:
            sys.stderr.write("\r" + " " * self.width + "\r")
            sys.stderr.flush()
            self.width = 0


_handler = _LineHandler()


def enabled() -> bool:
    return os.environ.get("MINIPT2_PROGRESS", "1") != "0" and sys.stderr.isatty()


@contextlib.contextmanager
def compiling(what: str) -> Iterator[None]:
    """Show ``what`` (and whatever the stages report meanwhile) until the block ends."""
    if not enabled():
        yield
        return
    logger.addHandler(_handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        logger.info("%s", what)
        yield
    finally:
        _handler.clear()
        logger.removeHandler(_handler)
