"""Commands on the store, which work while servers run: import, watch, recall, explain, forget
and tokens. Each goes through `SharedMemory`: it forwards to the process that owns the store,
or owns it itself for its short lifetime."""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from agentmemrec.indexing.errors import InputError
from agentmemrec.server.cli.common import (
    note_args,
    open_memory,
    project_args,
    read_memory,
    redact_arg,
    source_settings,
    store_arg,
    transcript_args,
)
from agentmemrec.server.console import emit
from agentmemrec.server.settings import Settings, watch_folders

log = logging.getLogger("agentmemrec")
IMPORT_BATCH = 1000
LISTED = 20  # the units `redact` names in its line for a project


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    p = sub.add_parser("import", help="import a JSONL file of remember items, or Claude Code "
                       "transcripts: import claude-code [DIR]")
    p.add_argument("file", type=Path, metavar="FILE|claude-code",
                   help="a JSONL file, one remember item per line; or the word claude-code")
    p.add_argument("dir", type=Path, nargs="?", default=None,
                   help="claude-code: a transcript folder or file (default ~/.claude/projects)")
    project_args(p)
    transcript_args(p)
    redact_arg(p)

    p = sub.add_parser("watch", help="keep a folder's notes and ADRs in a project")
    p.add_argument("folder", type=Path, help="the folder to watch (paths are stored relative to its repository)")
    project_args(p)
    note_args(p)
    p.add_argument("--once", action="store_true", help="reconcile once and exit")
    redact_arg(p)

    p = sub.add_parser("recall", help="print the slate for a query")
    p.add_argument("query", help="what the slate should answer")
    project_args(p)
    p.add_argument("--budget", type=int, default=2700, help="token budget of the slate (default 2700)")
    p.add_argument("--as-of", default=None, help="ISO time: only what was recorded by then is eligible")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")

    p = sub.add_parser("explain", help="explain a slate's selection")
    p.add_argument("slate_id", help="the slate id a recall printed (s_...)")
    p.add_argument("--ref", action="append", default=[], help="a ref or id expected in the slate (repeatable)")
    store_arg(p)

    p = sub.add_parser("forget", help="remove units by ref or id")
    p.add_argument("refs", nargs="+", help="refs or ids to remove")
    project_args(p)

    p = sub.add_parser("redact", help="redact the secrets in what is already stored (written before a "
                       "pattern existed, or with --no-redact)")
    project_args(p)
    p.add_argument("--all-projects", action="store_true", help="every project in the store, not one")
    p.add_argument("--dry-run", action="store_true", help="say what would change, and change nothing")

    p = sub.add_parser("export", help="write a project's items as JSONL that `import` reads: a backup, or a move "
                       "to another store")
    project_args(p)
    p.add_argument("--out", type=Path, default=None, help="the file to write (default: standard output)")

    p = sub.add_parser("tokens", help="bearer tokens for `serve --http`")
    tokens = p.add_subparsers(dest="tokens_command", required=True)
    add = tokens.add_parser("add", help="make a token for NAME; prints its secret once")
    add.add_argument("name", help="who the token is for (letters, digits, . _ @ -)")
    add.add_argument("--projects", required=True,
                     help="comma-separated projects it may use; the first is its default")
    listing = tokens.add_parser("list", help="show every token's name and projects (never a secret)")
    revoke = tokens.add_parser("revoke", help="remove a token; requests with it get 401 at once")
    revoke.add_argument("name", help="the token's name")
    for command in (add, listing, revoke):
        store_arg(command)
    return {"import": cmd_import, "watch": cmd_watch, "recall": cmd_recall, "explain": cmd_explain,
            "forget": cmd_forget, "redact": cmd_redact, "export": cmd_export,
            "tokens": cmd_tokens}


def read_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The items, and the line of the file each came from (blank lines are skipped)."""
    items, at = [], []
    try:
        lines = path.read_text(encoding="utf-8").split("\n")  # not splitlines: U+2028 may sit in a string
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not UTF-8 text (byte {exc.start} is not UTF-8); save it as UTF-8 "
                         "and run the import again") from exc
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            items.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{n}: not valid JSON ({exc.msg}); fix the line and retry") from exc
        except RecursionError as exc:
            raise InputError(f"{path}:{n}: JSON nested too deeply to read; fix the line and retry") from exc
        at.append(n)
    return items, at


def check_items(path: Path, items: list[dict[str, Any]], at: list[int]) -> None:
    """The checks the store applies to each batch, made on the whole file before the store is
    opened (or made): a bad line, or an empty file, leaves nothing behind."""
    from agentmemrec.indexing.units import validate_batch, validate_item  # noqa: PLC0415
    if not items:
        raise InputError(f"{path} holds no items; write one remember item a line, e.g. "
                         '{"kind": "turn", "text": "..."}')
    for raw, n in zip(items, at):
        validate_item(raw, f"line {n}")
    for start in range(0, len(items), IMPORT_BATCH):
        try:
            validate_batch(items[start:start + IMPORT_BATCH])
        except InputError as exc:  # "items 2, 5" of the batch are lines of the file
            said = re.sub(r"\bitems? (\d+(?:, \d+)*)", lambda m: _lines(m[1], at, start), str(exc))
            raise InputError(f"{said}; fix it and run the import again") from exc


def import_items(memory: Any, project: str, items: list[dict[str, Any]], at: list[int],
                 label: str = "import") -> tuple[int, Counter[str]]:
    """Write the checked items (`check_items`) in batches; how many were stored or updated, and
    the secrets redaction replaced, by pattern. What only the store can refuse (a `supersedes`
    naming nothing) stops the import at its batch, named by the file's line; the batches before it
    are stored, and running it again after the fix stores the rest."""
    from tqdm import tqdm  # noqa: PLC0415

    stored, redacted = 0, Counter()
    with tqdm(total=len(items), desc=label, unit="item", file=sys.stderr, disable=False, mininterval=1.0) as bar:
        for start in range(0, len(items), IMPORT_BATCH):
            batch = items[start:start + IMPORT_BATCH]
            try:
                written = memory.ingest(project, batch)
            except InputError as exc:  # "item 3" of the batch is a line of the file
                said = re.sub(r"\bitems? (\d+(?:, \d+)*)", lambda m: _lines(m[1], at, start), str(exc))
                done = f"; the {start} items before it are stored" if start else ""
                raise InputError(f"{said}{done}; fix it and run the import again") from exc
            stored += written.changed
            redacted.update(written.redactions)
            # Each batch is one transaction: after an interruption, running the import again
            # stores the rest and leaves the batches already committed unchanged.
            log.info("%s: items %d-%d committed", label, start + 1, start + len(batch))
            bar.update(len(batch))
    return stored, redacted


def _lines(positions: str, at: list[int], start: int) -> str:
    """"3" or "2, 3" (1-based in a batch that starts at item `start`) as the file's lines."""
    found = [str(at[start + int(k) - 1]) for k in positions.split(", ")]
    return ("lines " if len(found) > 1 else "line ") + ", ".join(found)


def cmd_import(args: argparse.Namespace) -> int:
    if str(args.file) == "claude-code":  # a file of that name: pass ./claude-code
        return cmd_import_claude_code(args)
    if args.dir is not None:
        raise InputError(f"import takes one JSONL file; {args.dir} is extra "
                         "(use 'import claude-code DIR' for transcripts)")
    settings = Settings.load(args.project, store=args.store, **source_settings(args))
    items, at = read_jsonl(args.file)
    check_items(args.file, items, at)  # before the store is opened or made
    memory = open_memory(settings)
    try:
        changed, redacted = import_items(memory, settings.project, items, at)
    finally:
        memory.close()
    from agentmemrec.server.sources import tally  # noqa: PLC0415
    emit(f"{len(items)} items read, {changed} stored or updated in project {settings.project}"
         + (f"; {tally('redacted', redacted, 'secrets')}" if redacted else ""))
    return 0


def cmd_import_claude_code(args: argparse.Namespace) -> int:
    from agentmemrec.server.sources import import_claude_code, import_summary  # noqa: PLC0415
    settings = Settings.load(args.project, store=args.store, **source_settings(args))
    memory = open_memory(settings)
    try:
        report = import_claude_code(memory, settings, args.dir, args.project)
    finally:
        memory.close()
    for line in import_summary(report, args.project):
        emit(line)
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    from agentmemrec.server.sources import run_watch  # noqa: PLC0415
    settings = Settings.load(args.project, store=args.store, **source_settings(args))
    [folder] = watch_folders([args.folder])
    memory = open_memory(settings, one_shot=args.once)
    try:
        return run_watch(memory, settings, folder, args.once, emit)
    finally:
        memory.close()


def cmd_recall(args: argparse.Namespace) -> int:
    from agentmemrec.indexing.units import parse_time  # noqa: PLC0415
    from agentmemrec.ranking.memory import check_budget, check_query  # noqa: PLC0415
    from agentmemrec.server.app import slate_result  # noqa: PLC0415
    # refused before the store is opened or made, naming the flags
    check_query(args.query), check_budget(args.budget, "--budget"), parse_time(args.as_of, "--as-of")
    settings = Settings.load(args.project, store=args.store)
    memory = read_memory(settings)
    try:
        slate = memory.recall(settings.project, args.query, args.budget, args.as_of)
        counts = memory.projects() if not slate.items else {}
    finally:
        memory.close()
    notes = list(slate.notes)
    if not slate.items and not counts.get(settings.project):
        notes.append("projects in this store: " + (", ".join(f"{p} ({n} units)" for p, n in counts.items())
                                                   or "none yet") + "; pick one with --project")
    if args.json:
        emit(slate_result(slate).model_copy(update={"notes": notes}).model_dump_json(indent=2))
        return 0
    emit(slate.context, end="")
    strength = "" if slate.evidence_strength is None else f", evidence strength {slate.evidence_strength:.2f}"
    emit(f"-- slate {slate.slate_id}: {len(slate.items)} items, {slate.tokens_used}/"
         f"{slate.budget} tokens{strength} (agentmemrec explain {slate.slate_id})")
    for note in notes:
        emit(f"-- note: {note}")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    settings = Settings.load(store=args.store)
    memory = open_memory(settings)
    try:  # the local CLI speaks for the store's owner: every project is visible to it
        payload = memory.explain(args.slate_id, frozenset(memory.projects()) | {settings.project},
                                 args.ref)
    finally:
        memory.close()
    emit(json.dumps(payload, indent=2, default=str))
    return 0


def cmd_forget(args: argparse.Namespace) -> int:
    settings = Settings.load(args.project, store=args.store)
    memory = open_memory(settings)
    try:
        removed = memory.forget(settings.project, args.refs)
    finally:
        memory.close()
    emit(f"removed {len(removed)} units from project {settings.project}")
    return 0


def cmd_redact(args: argparse.Namespace) -> int:
    from agentmemrec.server.sources import tally  # noqa: PLC0415
    settings = Settings.load(args.project, store=args.store)
    memory = read_memory(settings)  # a home with no store yet has nothing to redact: none is made
    try:
        stored = memory.projects()
        projects = sorted(stored) if args.all_projects else [settings.project]
        reports = [redact_project(memory, project, args.dry_run, stored[project]) for project in projects
                   if project in stored]
    finally:
        memory.close()
    if not args.all_projects and settings.project not in stored:
        emit(f"-- project {settings.project} holds nothing; `agentmemrec ls` lists the projects")
    verb = "would redact" if args.dry_run else "redacted"
    for report in reports:
        units = ", ".join(f"#{u['id']}" + (f" ({u['ref']})" if u["ref"] else "") for u in report["units"][:LISTED])
        more = f" and {len(report['units']) - LISTED} more" if len(report["units"]) > LISTED else ""
        emit(f"project {report['project']}: {tally(verb, report['redacted'], 'secrets')}"
             + (f" in {len(report['units'])} units: {units}{more}" if units else "")
             + (f"; in the queries of {report['queries']} saved explanations" if report["queries"] else ""))
        for u in report["named_by_a_secret"]:
            emit(f"-- #{u['id']} is named by a secret in its ref or path, which cannot be replaced: "
                 f"agentmemrec forget '#{u['id']}' --project {report['project']}")
    if args.all_projects and not reports:
        emit("-- no project yet; nothing to redact")
    return 0


def redact_project(memory: Any, project: str, dry_run: bool, units: int) -> dict[str, Any]:
    """`redact_stored` window after window (through the owner), with a progress bar."""
    from tqdm import tqdm  # noqa: PLC0415

    from agentmemrec.ranking.scrub import REDACT_SPAN, redact_in_windows  # noqa: PLC0415
    with tqdm(total=units, desc=f"redact {project}", unit="unit", file=sys.stderr, mininterval=1.0) as bar:
        return redact_in_windows(lambda after: memory.call("redact_stored", project, dry_run, after, REDACT_SPAN),
                                 bar.update)


def cmd_export(args: argparse.Namespace) -> int:
    """Every item of a project, oldest first, one JSON object a line (`views.export_items`, asked
    window by window through the owner), with a progress bar on stderr."""
    from tqdm import tqdm  # noqa: PLC0415
    settings = Settings.load(args.project, store=args.store)
    memory = read_memory(settings)  # a home with no store has nothing to export: none is made
    try:
        units = memory.projects().get(settings.project)
        if not units:
            raise InputError(f"project {settings.project} holds nothing to export; `agentmemrec ls` lists the projects")
        partial = args.out.with_name(args.out.name + ".partial") if args.out else None  # FILE only once whole
        out = partial.open("w", encoding="utf-8") if partial else sys.stdout
        written = unlinked = 0
        try:
            with tqdm(total=units, desc=f"export {settings.project}", unit="unit", file=sys.stderr,
                      mininterval=1.0) as bar:
                after = None
                while True:
                    part = memory.call("export", settings.project, after, IMPORT_BATCH)
                    out.writelines(json.dumps(item, ensure_ascii=False) + "\n" for item in part["items"])
                    written, unlinked = written + len(part["items"]), unlinked + part["unlinked"]
                    bar.update(part["read"])
                    if (after := part["next"]) is None:
                        break
        except BaseException:
            if partial:
                out.close()
                partial.unlink()
            raise
        if partial:
            out.close()
            partial.replace(args.out)
    finally:
        memory.close()
    where = args.out or "standard output"
    log.info("%d items of project %s written to %s (`agentmemrec import FILE --project P` reads them)",
             written, settings.project, where)
    if unlinked:
        log.warning("%d decisions replace a decision without a ref: their `supersedes` is left out (only a "
                    "ref names a decision in another store)", unlinked)
    return 0


def cmd_tokens(args: argparse.Namespace) -> int:
    from agentmemrec.indexing.store.principals import hash_secret, new_secret  # noqa: PLC0415
    memory = open_memory(Settings.load(store=args.store))
    try:
        if args.tokens_command == "add":
            secret = new_secret()
            principal = memory.call("tokens.add", args.name, hash_secret(secret),
                                    [p.strip() for p in args.projects.split(",") if p.strip()])
            emit(secret)
            log.info("token %r made for projects %s; its secret is shown this once", principal.name,
                     ",".join(principal.projects))
            known = memory.call("kinds")
            for project in (p for p in principal.projects if p not in known):
                log.warning("project %r holds nothing yet (a typo?); the store holds %s", project,
                            ", ".join(sorted(known)) or "no project")
        elif args.tokens_command == "list":
            for p in memory.call("tokens.list"):
                emit(f"{p.name}\t{','.join(p.projects)}\t{p.created_at:%Y-%m-%d %H:%M}")
        else:
            memory.call("tokens.revoke", args.name)
            emit(f"revoked token {args.name}")
    finally:
        memory.close()
    return 0
