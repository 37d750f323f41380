"""VariableTracker families, one file each (book/docs/dynamo.md, "Variables").

base (VariableTracker, NullVariable) -> constant -> lists -> tensor -> torch ->
builtin -> misc; builder wraps real values into them.
"""
