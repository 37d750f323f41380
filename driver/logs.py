"""Logs by channel, in the spirit of ``TORCH_LOGS``.

Input: ``MINIPT2_LOGS=graphs,guards,fusion,...`` in the environment (read when ``driver`` is
imported), or ``driver.set_logs("graphs", "fusion")`` in a program; ``"all"`` turns on every
channel and ``set_logs()`` turns them all off.
Output: messages on stderr, one ``logging`` logger per channel named ``minipt2.<channel>``.
Any stage may log to a channel with ``logging.getLogger("minipt2.<channel>")``; the driver
itself logs each stage's artifacts as they are produced.

Chapter: book/docs/driver.md ("Logs").
"""

from __future__ import annotations

import logging
import os
import sys

# --8<-- [start:channels]
CHANNELS = {
    "graphs": "captured FX graphs (dynamo)",
    "guards": "the guards of each compiled graph (dynamo)",
    "recompiles": "recompilations, and the guard that failed (dynamo)",
    "breaks": "graph breaks and eager fallbacks, with reasons (dynamo)",
    "aot": "joint, forward and backward graphs (aotautograd)",
    "prims": "graphs after decomposition into prims (primtorch)",
    "ir": "loop-level IR (inductor)",
    "fusion": "fusion decisions with reasons (inductor)",
    "kernels": "generated kernels (inductor)",
    "wrapper": "generated wrapper modules (inductor)",
    "autotune": "the launch config chosen for each kernel in max-autotune, and how (inductor)",
    "timing": "seconds per compilation step of each graph (inductor)",
}
# --8<-- [end:channels]

# Which channel each artifact key goes to (kernels by prefix).
ARTIFACT_CHANNEL = {
    "captured_graph": "graphs", "guards": "guards", "aten_graph": "aot", "joint_graph": "aot",
    "fw_graph": "aot", "bw_graph": "aot", "prims_graph": "prims", "loop_ir": "ir",
    "fusion": "fusion", "wrapper": "wrapper", "timing": "timing",
}



class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (so redirection and pytest work)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


_handler: logging.Handler | None = None


def logger(channel: str) -> logging.Logger:
    return logging.getLogger(f"minipt2.{channel}")


def _parse(spec: str) -> list[str]:
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if "all" in names:
        return list(CHANNELS)
    unknown = [n for n in names if n not in CHANNELS]
    if unknown:
        raise ValueError(f"MINIPT2_LOGS / set_logs: unknown channel(s) {unknown}; "
                         f"known: {', '.join(CHANNELS)}, all")
    return names


def set_logs(*channels: str) -> None:
    """Turn on exactly ``channels`` (names or comma-separated lists); none turns all off."""
    global _handler
    wanted = set(_parse(",".join(channels)))
    if _handler is None:
        _handler = _StderrHandler()
        _handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
    for channel in CHANNELS:
        log = logger(channel)
        log.propagate = False
        if channel in wanted:
            log.setLevel(logging.INFO)
            if _handler not in log.handlers:
                log.addHandler(_handler)
        else:
            log.setLevel(logging.WARNING)
            if _handler in log.handlers:
                log.removeHandler(_handler)


def artifact_logged(key: str) -> bool:
    """Whether the channel of the stage text ``key`` is on (else its text is never printed:
    [Note: texts printed when read] in inductor/compile_fx.py)."""
    base = key.removeprefix("backward/")  # a training graph's backward logs where its forward does
    channel = "kernels" if base.startswith("kernels/") else ARTIFACT_CHANNEL.get(base)
    return channel is not None and logger(channel).isEnabledFor(logging.INFO)


def log_artifact(key: str, title: str, text: str) -> None:
    if artifact_logged(key):
        base = key.removeprefix("backward/")
        channel = "kernels" if base.startswith("kernels/") else ARTIFACT_CHANNEL[base]
        logger(channel).info("%s\n%s", title, text.rstrip())


def configure_from_environment() -> None:
    spec = os.environ.get("MINIPT2_LOGS")
    if spec:
        set_logs(spec)
