"""`agentmemrec migrate --to postgresql://...`: the home's DuckDB store moved into a team store."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Callable

from agentmemrec.indexing.errors import InputError, StoreLocked
from agentmemrec.server.console import complain, emit
from agentmemrec.server.settings import Settings


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    p = sub.add_parser("migrate", help="copy the home's DuckDB store into a PostgreSQL store "
                       "(idempotent: run it again to resume or to copy what was added since)")
    p.add_argument("--to", required=True, metavar="URL", help="the PostgreSQL store, postgresql://...")
    p.add_argument("--project", action="append", default=None,
                   help="a project to copy (repeatable; default: every project)")
    return {"migrate": cmd_migrate}


def cmd_migrate(args: argparse.Namespace) -> int:
    from tqdm import tqdm  # noqa: PLC0415

    from agentmemrec.indexing.store.backends import check_store_url, database_file, open_store  # noqa: PLC0415
    from agentmemrec.indexing.store.migrate import migrate, units_to_move  # noqa: PLC0415
    url, home = check_store_url(args.to, "--to"), Settings.load().home
    if not database_file(home).exists():
        raise InputError(f"no store to migrate in {home}; set AGENTMEMREC_HOME to the home that holds it")
    try:
        source = open_store(home)
    except StoreLocked as exc:
        raise InputError(_held(home, exc)) from exc
    try:
        target = open_store(home, url)
        try:
            total = sum(units_to_move(source, args.project).values())
            with tqdm(total=total, desc="migrate", unit="unit", file=sys.stderr, mininterval=1.0) as bar:
                moved = migrate(source, target, args.project, bar.update)
        finally:
            target.close()
    finally:
        source.close()
    emit(f"{moved.units} units copied ({moved.units_there} already there), {moved.links} supersession "
         f"links, {moved.vectors} vectors (nothing re-embedded), {moved.tokens} tokens "
         f"({moved.tokens_there} already there); saved explanations stay behind")
    if moved.forgotten:
        emit(f"{moved.forgotten} units left out: they were forgotten in the target, and migrate never "
             "brings a forgotten unit back (remember it there again if it should return)")
    if moved.tokens_left:
        emit(f"tokens not copied: {', '.join(moved.tokens_left)}")
    if moved.tokens_revoked:
        complain(f"tokens revoked here are still accepted by the target: {', '.join(moved.tokens_revoked)}; "
                 "revoke them there if their secrets should stop working for the team too "
                 "(agentmemrec tokens revoke NAME --store URL)")
    conflicts = list(dict.fromkeys(moved.conflicts))
    if conflicts:
        shown = ", ".join(conflicts[:20]) + (f" and {len(conflicts) - 20} more" if len(conflicts) > 20 else "")
        complain(f"{len(conflicts)} refs are held in the target with other content and were left as they are "
                 f"there (another developer's unit under the same ref, or one changed here since the last "
                 f"migrate): {shown}. Rename the ref here, or forget it in the target (agentmemrec forget REF "
                 f"--project P --store URL), then run migrate again.")
        return 1
    return 1 if moved.tokens_revoked else 0


def _held(home: Path, exc: StoreLocked) -> str:
    """Who holds the home's DuckDB file, and how to make them let go."""
    from agentmemrec.server.hook_process import OWNER_IDLE_EXIT_S  # noqa: PLC0415
    from agentmemrec.server.owner_socket import take_lock  # noqa: PLC0415
    fd = take_lock(home)
    if fd is not None:  # no AgentMemRec process owns it: another program has the file open
        os.close(fd)
        return f"{exc}; close that program, then run migrate again (nothing was copied)"
    pid = (home / "owner.lock").read_text(encoding="utf-8").strip() or "?"
    return (f"an AgentMemRec process (pid {pid}) owns the memory store in {home}: a client's `agentmemrec "
            f"serve`, or the owner a hook started, which leaves after {OWNER_IDLE_EXIT_S:.0f} s without a call. "
            f"Stop it (quit the client, or kill {pid}), then run migrate again (nothing was copied)")
