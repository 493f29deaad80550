"""Command output. In stdio serving mode stdout is the JSON-RPC stream, so only CLI commands that
do not serve write here, through this one function; logs always go to stderr."""

import sys


def emit(text: str = "", end: str = "\n") -> None:
    sys.stdout.write(text + end)
    sys.stdout.flush()
