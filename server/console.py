"""Command output. In stdio serving mode stdout is the JSON-RPC stream, so only CLI commands that
do not serve write here, through `emit`; what went wrong goes to stderr through `complain`, as
logs always do. Both show control characters as escapes (`printable`): stored text and file names
are anyone's, and must not drive the terminal."""

import re
import sys

# C0 controls but tab and newline, DEL, C1 controls, and a carriage return that is not the end of a
# CRLF line: escape sequences (ESC, CSI U+009B, OSC U+009D) could set the title, clear the screen or
# write the clipboard (OSC 52), and a lone CR could print over what came before it on the line.
CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)")


def printable(text: str) -> str:
    """`text` with each control character shown as its JSON escape (`\\u001b`): visible in plain
    output, and the same value inside JSON, which never holds them raw."""
    return CONTROL.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


def emit(text: str = "", end: str = "\n") -> None:
    sys.stdout.write(printable(text) + end)
    sys.stdout.flush()


def complain(text: str) -> None:
    """A command's error line, or a notice such as an empty home's, on stderr: `agentmemrec: ...`."""
    sys.stderr.write(f"agentmemrec: {printable(text)}\n")
    sys.stderr.flush()
