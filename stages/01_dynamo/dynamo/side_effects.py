"""SideEffects: mutations of the world outside the frame, replayed after the graph.

Input: during tracing, attribute writes (``self.count = n``), global writes
(``global STEP``) and mutations of containers that came from outside
(``cache.append(x)`` on a list argument). Output: the pending values, which
later reads in the same trace see; the trackers whose real values the
residual code needs; and ``replay(rt)``, which performs the writes in
program order after the graph has run.
Chapter: book/docs/dynamo.md ("Side effects").

# [Note: side effects]
# A graph computes tensors; it cannot set ``self.count`` or append to a list.
# So these writes are *recorded* while tracing and *replayed* by the
# residual Python code after the compiled graph returns (codegen.py). Reads
# in the same trace must see the new value, so every lookup checks here
# first. Objects created during the trace need no replay: they are rebuilt
# from their final tracker when they escape.
#
# [Note: a print after the graph]
# ``print("step", x.shape[0])`` in a forward used to split the graph in two: the work before
# it, the print run eagerly, then a resume function for the rest, each piece with its own
# guards, autograd Function and backward node. But a print whose arguments are known at
# trace time (constants, static sizes) does not depend on the graph, and nothing in a graph
# can see what a print wrote. So it is recorded here and replayed when the graph has run,
# before anything else the frame does next: the same text, in the same order relative to
# every other print and write the frame makes (a print is deferred only while no write is
# pending, and a break or the return replays everything first). Only its timing against the
# GPU's work moves, and a graph that raised at run time would lose it. Arguments that need
# the graph (a tensor, a symbolic size) still break, as does a ``file=`` the trace cannot
# name. It is off unless ``config.reorder_prints`` is set (``MINIPT2_REORDER_PRINTS=1``):
# a print is the graph break every tutorial shows, PyTorch's included; PyTorch's dynamo
# reorders the functions in its ``reorderable_logging_functions`` setting, empty by default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .variables.base import MutableLocal, VariableTracker


class SideEffects:
    def __init__(self) -> None:
        # (id(obj), name) -> (obj, owner tracker, name, value), in first-write order
        self.attr_writes: dict[tuple[int, str], tuple[Any, VariableTracker, str,
                                                       VariableTracker]] = {}
        self.global_writes: dict[tuple[int, str], tuple[dict, str, VariableTracker]] = {}
        self.mutated: dict[MutableLocal, VariableTracker] = {}  # sourced containers, latest
        # [Note: a print after the graph]: (the stream's tracker or None, args, options)
        self.prints: list[tuple[VariableTracker | None, tuple, dict[str, Any]]] = []

    # -- recording --------------------------------------------------------------
    def store_attr(self, owner: VariableTracker, name: str, value: VariableTracker) -> None:
        obj = owner.value
        self.attr_writes[(id(obj), name)] = (obj, owner, name, value)

    def pending_attr(self, obj: Any, name: str) -> VariableTracker | None:
        found = self.attr_writes.get((id(obj), name))
        return None if found is None else found[3]

    def store_global(self, f_globals: dict, name: str, value: VariableTracker) -> None:
        self.global_writes[(id(f_globals), name)] = (f_globals, name, value)

    def pending_global(self, f_globals: dict, name: str) -> VariableTracker | None:
        found = self.global_writes.get((id(f_globals), name))
        return None if found is None else found[2]

    def track_mutation(self, new: VariableTracker) -> None:
        """A container from outside the frame changed: write it back after the graph."""
        if new.source is not None and new.mutable_local is not None:
            self.mutated[new.mutable_local] = new

    def latest(self, value: VariableTracker) -> VariableTracker:
        if value.mutable_local is None:
            return value
        return self.mutated.get(value.mutable_local, value)

    def defer_print(self, stream: VariableTracker | None, args: tuple,
                    options: dict[str, Any]) -> bool:
        """Record ``print(*args, file=stream, **options)`` to run after the graph; False (and
        nothing recorded) when a write is already pending, which the print would then
        overtake."""
        if self.attr_writes or self.global_writes or self.mutated:
            return False
        self.prints.append((stream, args, options))
        return True

    # -- keeping trackers current ---------------------------------------------------
    def apply(self, fn: Callable[[Any], Any]) -> None:
        """Rewrite every stored tracker with ``fn`` (used by ``replace_all``)."""
        self.attr_writes = {k: (o, fn(w), n, fn(v)) for k, (o, w, n, v) in
                            self.attr_writes.items()}
        self.global_writes = {k: (g, n, fn(v)) for k, (g, n, v) in self.global_writes.items()}
        self.mutated = {k: fn(v) for k, v in self.mutated.items()}

    def snapshot(self) -> SideEffects:
        other = SideEffects()
        other.attr_writes = dict(self.attr_writes)
        other.global_writes = dict(self.global_writes)
        other.mutated = dict(self.mutated)
        other.prints = list(self.prints)
        return other

    def restore(self, snapshot: SideEffects) -> None:
        self.attr_writes = dict(snapshot.attr_writes)
        self.global_writes = dict(snapshot.global_writes)
        self.mutated = dict(snapshot.mutated)
        self.prints = list(snapshot.prints)

    # -- after the graph -------------------------------------------------------------
    def values(self) -> list[VariableTracker]:
        """Trackers whose real values the replay needs (their tensors are graph outputs)."""
        found = [v for _, _, _, v in self.attr_writes.values()]
        found += [v for _, _, v in self.global_writes.values()]
        found += [item for v in self.mutated.values() for item in _contents(v)]
        return found

    def is_empty(self) -> bool:
        return not (self.attr_writes or self.global_writes or self.mutated or self.prints)

    def replay(self, rt: Any) -> None:
        """Perform the recorded prints, then the writes on the real objects, in program
        order (a print is deferred only while no write is pending, so it came first)."""
        for stream, args, options in self.prints:
            print(*args, **options, **({} if stream is None else
                                       {"file": stream.reconstruct(rt)}))
        for container in self.mutated.values():
            _write_back(container, rt)
        for obj, owner, name, value in self.attr_writes.values():
            # the object of *this* call: an entry serves every instance of a module's class
            # ([Note: module guards]), so the one traced is not the one to write to
            target = obj if owner.source is None else owner.reconstruct(rt)
            setattr(target, name, value.reconstruct(rt))
        for f_globals, name, value in self.global_writes.values():
            f_globals[name] = value.reconstruct(rt)

    def describe(self) -> list[str]:
        lines = [f"{o.source or type(o.value).__name__}.{n} = ..." for _, o, n, _ in
                 self.attr_writes.values()]
        lines += [f"global {n} = ..." for _, n, _ in self.global_writes.values()]
        lines += [f"{v.source} mutated" for v in self.mutated.values()]
        lines += [f"print{args!r}" for _, args, _ in self.prints]
        return lines


def _contents(container: VariableTracker) -> list[VariableTracker]:
    items = getattr(container, "items", ())
    return list(items.values()) if isinstance(items, dict) else list(items)


def _write_back(container: VariableTracker, rt: Any) -> None:
    """Give the caller's own list/dict/set the contents its tracker ended with."""
    from .variables.dicts import ConstDictVariable, SetVariable

    real = rt.eval(container.source)
    if isinstance(container, ConstDictVariable):
        new = {k: v.reconstruct(rt) for k, v in container.items.items()}
        real.clear()
        real.update(new)
    elif isinstance(container, SetVariable):
        real.clear()
        real.update(container.values())
    else:
        real[:] = [item.reconstruct(rt) for item in container.items]
