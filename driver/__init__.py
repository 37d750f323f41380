"""driver: composes the four stages; public API and CLI."""
