"""The `agentmemrec` command line, one module per command group: serving (`serve`, `demo`), the
store (`import`, `watch`, `recall`, `explain`, `forget`, `tokens`), models, and evaluation
(`eval`, `train`)."""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

from agentmemrec.indexing.errors import InputError, StoreError
from agentmemrec.server.cli import evaluation, memory, models, serve
from agentmemrec.server.cli.common import setup_logging
from agentmemrec.server.cli.serve import serve_settings
from agentmemrec.server.settings import VERSION

__all__ = ["build_parser", "main", "serve_settings"]
GROUPS = (serve, memory, models, evaluation)


def _parser_and_commands() -> tuple[argparse.ArgumentParser, dict[str, Callable[[argparse.Namespace], int]]]:
    parser = argparse.ArgumentParser(prog="agentmemrec", description="AgentMemRec: a long-term memory for coding assistants that answers each query with a token-budgeted slate of evidence.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    parser.add_argument("--version", action="version", version=f"agentmemrec {VERSION}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    commands: dict[str, Callable[[argparse.Namespace], int]] = {}
    for group in GROUPS:
        commands.update(group.register(sub))
    return parser, commands


def build_parser() -> argparse.ArgumentParser:
    return _parser_and_commands()[0]


def main(argv: Sequence[str] | None = None) -> int:
    parser, commands = _parser_and_commands()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what a result file says produced it
    setup_logging(args.verbose)
    try:
        return int(commands[args.command](args) or 0)
    except InputError as exc:
        print(f"agentmemrec: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:
        print(f"agentmemrec: {exc}", file=sys.stderr)
        return 1
