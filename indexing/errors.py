"""The two kinds of error the core raises.

`InputError`: the caller could have avoided it (bad kind, unknown ref, budget too small); the
message says what to do instead. `StoreError`: the caller could not (store corrupt, model file
missing). The MCP layer maps the first to `ToolError` and the second to `MCPError`, but for
`StoreUnavailable` (an outage), which is a `ToolError` that tells the model to retry later.
"""


class InputError(ValueError):
    """A request the caller can fix; nothing was written."""


class StoreError(RuntimeError):
    """The store or a derived index is unusable; the caller cannot fix it by retrying."""


class StoreUnavailable(StoreError):
    """The store cannot be reached now (a database outage); the same call may succeed once it is
    back, so the caller is told to retry."""


class StoreLocked(StoreError):
    """Another process holds the DuckDB file open; it may be about to let go."""
