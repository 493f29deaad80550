"""`agentmemrec setup`: connect a client (Claude Code, Cursor, Claude Desktop) in one command."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, Callable

from agentmemrec.server.console import emit


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    p = sub.add_parser("setup", help="add agentmemrec to a client's configuration: the MCP server, "
                       "and for Claude Code the hooks and the session capture")
    p.add_argument("client", choices=["claude-code", "cursor", "claude-desktop"], help="the client to set up")
    p.add_argument("--project", default=None,
                   help="the project this repository's memory goes to (default: the name of the "
                        "git repository around --dir, as for captured sessions)")
    p.add_argument("--dir", type=Path, default=None,
                   help="the repository (default: the git repository around the current folder)")
    p.add_argument("--user-dir", type=Path, default=None,
                   help="the folder holding the client's user configuration (default: your home folder)")
    p.add_argument("--no-watch", dest="watch", action="store_false",
                   help="do not have the server watch the repository's notes and ADRs (Claude Code, Cursor)")
    p.add_argument("--dry-run", action="store_true", help="print the changes as a diff; write nothing")
    p.add_argument("--remove", action="store_true", help="take out what setup added, and nothing else")
    return {"setup": cmd_setup}


def cmd_setup(args: argparse.Namespace) -> int:
    from agentmemrec.indexing.sources.transcripts import ProjectMap, git_root  # noqa: PLC0415
    from agentmemrec.indexing.errors import InputError  # noqa: PLC0415
    from agentmemrec.indexing.units import check_project  # noqa: PLC0415
    from agentmemrec.server import clients  # noqa: PLC0415
    from agentmemrec.server.owner_socket import HOME_ENV, default_home  # noqa: PLC0415
    if args.dir is not None and not args.dir.expanduser().is_dir():
        raise InputError(f"--dir {args.dir}: no such folder; pass the repository's folder (nothing was written)")
    repo = git_root(str((args.dir or Path.cwd()).expanduser().resolve()))
    project = check_project(args.project or ProjectMap().project_for(str(repo)) or "default")
    env = ((HOME_ENV, str(Path(os.environ[HOME_ENV]).expanduser().resolve())),) if os.environ.get(HOME_ENV) else ()
    # a project other than the repository's own name: its captured sessions are mapped to it
    renamed = args.client == "claude-code" and project != ProjectMap().project_for(str(repo))
    mapping = default_home().expanduser().resolve() / "project-map.json" if renamed else None
    target = clients.Target(args.client, (args.user_dir or Path.home()).expanduser(), repo, project, env=env,
                            watch=args.watch, project_map=mapping, user_dir_given=args.user_dir is not None)
    changes = clients.changes(target, remove=args.remove)
    for change in changes:
        if not change.changed:
            emit(f"{change.path}: {'nothing of agentmemrec in it' if args.remove else 'already set up'}")
        elif args.dry_run:
            emit(change.diff(), end="")
        else:
            backup = clients.apply(change)
            emit(f"{change.path}: {'removed agentmemrec' if args.remove else 'updated'}"
                 + (f" (the previous file is {backup})" if backup else " (new file)"))
        if change.note:
            emit(f"note: {change.note}")
    if args.dry_run:
        emit("dry run: nothing was written")
    elif any(c.changed for c in changes):
        what = "removed" if args.remove else f"set up for project {project} in {repo}"
        emit(f"{args.client}: {what}; {clients.RESTART[args.client]}")
    return 0
