"""The `agentmemrec` command line, one module per command group: serving (`serve`, `owner`,
`demo`), the store (`import`, `watch`, `recall`, `explain`, `forget`, `tokens`), what it holds
(`ls`, `show`, `stats`), models, evaluation (`eval`, `train`), the clients (`setup`, `hook`),
and moving to a team store (`migrate`).

`agentmemrec hook` runs on every prompt of a coding session, so `main` hands it over before
anything heavy is imported: this module imports only the standard library at the top."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Sequence

__all__ = ["build_parser", "main", "serve_settings"]


def __getattr__(name: str):  # noqa: ANN202 - `serve_settings` is imported from here, not eagerly
    if name == "serve_settings":
        from agentmemrec.server.cli.serve import serve_settings  # noqa: PLC0415
        return serve_settings
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _parser_and_commands() -> tuple[argparse.ArgumentParser, dict[str, Callable[[argparse.Namespace], int]]]:
    from agentmemrec.server import hook_process  # noqa: PLC0415
    from agentmemrec.server.cli import clients, evaluation, memory, models, serve, team, views  # noqa: PLC0415
    from agentmemrec.server.settings import VERSION  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="agentmemrec", description="AgentMemRec: a long-term memory for coding assistants that answers each query with a token-budgeted slate of evidence.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    parser.add_argument("--version", action="version", version=f"agentmemrec {VERSION}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    commands: dict[str, Callable[[argparse.Namespace], int]] = {}
    for group in (serve, memory, views, models, evaluation, clients, team, hook_process):
        commands.update(group.register(sub))
    parser.set_defaults(subparsers=sub.choices)  # a command's own usage for what it does not take
    return parser, commands


def build_parser() -> argparse.ArgumentParser:
    return _parser_and_commands()[0]


def main(argv: Sequence[str] | None = None) -> int:
    os.umask(0o077)  # what this process creates (store, indexes, socket, offsets) is its user's alone
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["hook"]:
        from agentmemrec.server.hook_process import main as hook  # noqa: PLC0415
        return hook(argv[1:])
    try:
        return _run(argv, list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:  # ^C, at start-up too (the imports take seconds): no traceback
        return 130


def _run(argv: list[str], given: list[str]) -> int:
    from agentmemrec.indexing.errors import InputError, StoreError  # noqa: PLC0415
    from agentmemrec.server.cli.common import setup_logging  # noqa: PLC0415
    from agentmemrec.server.console import complain  # noqa: PLC0415

    parser, commands = _parser_and_commands()
    args, extra = parser.parse_known_args(argv)
    if extra:  # told with the command's usage, not the top-level one
        args.subparsers[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    args.argv = given  # what a result file says produced it
    setup_logging(args.verbose, getattr(args, "log_file", None))  # only `owner` takes --log-file
    try:
        return int(commands[args.command](args) or 0)
    except InputError as exc:
        complain(str(exc))
        return 2
    except StoreError as exc:
        complain(str(exc))
        return 1
