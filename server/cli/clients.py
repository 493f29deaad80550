"""`agentmemrec setup`: connect a client (Claude Code, Cursor, Claude Desktop) in one command."""

from __future__ import annotations

import argparse
import os
import re
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
    from agentmemrec.indexing.errors import InputError  # noqa: PLC0415
    from agentmemrec.indexing.sources.transcripts import ProjectMap  # noqa: PLC0415
    from agentmemrec.indexing.units import check_project  # noqa: PLC0415
    from agentmemrec.server import clients  # noqa: PLC0415
    from agentmemrec.server.owner_socket import HOME_ENV, STORE_ENV, default_home  # noqa: PLC0415
    if os.environ.get(STORE_ENV) and not args.remove:  # the server and hooks setup writes use the home's store
        raise InputError(f"{STORE_ENV} names a PostgreSQL store, which setup's local server and command hooks "
                         "would not use: run `agentmemrec serve --http` on it and connect the client over "
                         "HTTP with a bearer token and its http hook (docs/team.md, docs/clients.md); unset "
                         f"{STORE_ENV} to set up the home's own store. Nothing was written.")
    if args.dir is not None and not args.dir.expanduser().is_dir():
        raise InputError(f"--dir {args.dir}: no such folder; pass the repository's folder (nothing was written)")
    repo = repository(args)
    named = repo is not None  # Claude Desktop outside a repository: the default project, as `serve` gives
    repo = repo or Path.cwd().resolve()
    project = check_project(args.project or (ProjectMap().project_for(str(repo)) if named else None) or "default")
    env = ((HOME_ENV, str(Path(os.environ[HOME_ENV]).expanduser().resolve())),) if os.environ.get(HOME_ENV) else ()
    # a project other than the repository's own name: its captured sessions are mapped to it
    renamed = args.client == "claude-code" and project != ProjectMap().project_for(str(repo))
    home = default_home().expanduser().resolve()
    target = clients.Target(args.client, (args.user_dir or Path.home()).expanduser(), repo, project, env=env,
                            watch=args.watch, project_map=home / "project-map.json" if renamed else None,
                            user_dir_given=args.user_dir is not None, record=home / clients.RECORD)
    elsewhere = None if args.project or not named or args.remove else clients.project_elsewhere(target)
    if elsewhere is not None:
        own = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{repo.parent.name}-{project}").strip("._-")
        raise InputError(f"{elsewhere} is already set up for project {project}, the name of this repository too: "
                         f"the two would share one memory. Give this one its own with --project NAME (for example "
                         f"--project {own}), or pass --project {project} to share it on purpose (nothing was written)")
    changes = clients.changes(target, remove=args.remove)
    for change in changes:
        if not change.changed:
            emit(f"{change.path}: {'nothing of agentmemrec in it' if args.remove else 'already set up'}")
        elif args.dry_run:
            emit(change.diff(), end="")
        else:
            backup = clients.apply(change)
            if change.after is None:
                emit(f"{change.path}: deleted (setup wrote it)")
            else:
                emit(f"{change.path}: {'removed agentmemrec' if args.remove else 'updated'}"
                     + (f" (the previous file is {backup})" if backup else " (new file)"))
        if change.note:
            emit(f"note: {change.note}")
    if args.dry_run:
        emit("dry run: nothing was written")
    elif any(c.changed for c in changes):
        what = "removed" if args.remove else f"set up for project {project}" + (f" in {repo}" if named else "")
        emit(f"{args.client}: {what}; {clients.RESTART[args.client]}")
    return 0


def repository(args: argparse.Namespace) -> Path | None:
    """The folder to set up: the git repository around --dir or the current folder, or --dir
    itself when it is in none. Outside any repository with no --dir, Claude Code and Cursor are
    refused (the server would watch whatever folder setup ran in) and Claude Desktop, which
    watches nothing, gets None. A home folder or a filesystem root is never watched."""
    from agentmemrec.indexing.errors import InputError  # noqa: PLC0415
    from agentmemrec.indexing.sources.transcripts import git_root  # noqa: PLC0415
    start = (args.dir or Path.cwd()).expanduser().resolve()
    repo = git_root(str(start))
    if args.dir is None and not (repo / ".git").exists():
        if args.client == "claude-desktop":
            return None
        raise InputError(f"{start} is not in a git repository: run setup in the repository, or name the folder "
                         "to set up with --dir (nothing was written)")
    if args.client != "claude-desktop" and args.watch and not args.remove \
            and repo in (Path.home().resolve(), Path(repo.anchor)):
        what = "your home folder" if repo == Path.home().resolve() else "the filesystem's root"
        raise InputError(f"{repo} is {what}: its server would watch every file under it; run setup in a "
                         "repository, or add --no-watch (nothing was written)")
    return repo
