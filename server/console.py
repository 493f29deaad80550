"""Command output. In stdio serving mode stdout is the JSON-RPC stream, so only CLI commands that
do not serve write here, through `emit`; what went wrong goes to stderr through `complain`, as
logs always do."""

import sys


def emit(text: str = "", end: str = "\n") -> None:
    sys.stdout.write(text + end)
    sys.stdout.flush()


def complain(text: str) -> None:
    """A command's error line, on stderr: `agentmemrec: ...`."""
    sys.stderr.write(f"agentmemrec: {text}\n")
    sys.stderr.flush()
