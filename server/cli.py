"""The `agentmemrec` command line: serve, import, recall, explain, forget, tokens, demo, eval.

Every command that touches the store goes through `SharedMemory`, so it works while servers run:
it forwards to the process that owns the store, or owns it itself for its short lifetime."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any, Sequence

from ..indexing.errors import InputError, StoreError
from .console import emit
from .settings import MAX_REQUEST_BYTES, Settings

log = logging.getLogger("agentmemrec")
IMPORT_BATCH = 1000


def _setup_logging(verbose: bool) -> None:
    # stdout is the JSON-RPC stream in stdio mode: every log line goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if verbose else logging.INFO,
                        format="agentmemrec %(levelname)s %(name)s: %(message)s")
    logging.getLogger("bm25s").setLevel(logging.WARNING)


def _project_args(p: argparse.ArgumentParser, allow: bool = False) -> None:
    p.add_argument("--project", help="project to work on (default: $AGENTMEMREC_PROJECT or 'default')")
    if allow:
        p.add_argument("--allow", default="", help="other projects this server may serve, comma-separated")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentmemrec", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", help="run the MCP server (stdio by default)")
    _project_args(p, allow=True)
    p.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio; "
                   "every request needs a bearer token from `agentmemrec tokens add`, whose "
                   "projects replace --project/--allow")
    p.add_argument("--host", default="127.0.0.1", help="HTTP address (default: 127.0.0.1 only)")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--max-request-bytes", type=int, default=MAX_REQUEST_BYTES,
                   help="largest HTTP request body accepted (default: 16 MiB); larger ones get 413")
    p.add_argument("--pool-size", type=int, default=128)

    p = sub.add_parser("import", help="import a JSONL file, one remember item per line")
    p.add_argument("file", type=Path)
    _project_args(p)

    p = sub.add_parser("recall", help="print the slate for a query")
    p.add_argument("query")
    _project_args(p)
    p.add_argument("--budget", type=int, default=2700)
    p.add_argument("--as-of", default=None)
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")

    p = sub.add_parser("explain", help="explain a slate's selection")
    p.add_argument("slate_id")
    p.add_argument("--ref", action="append", default=[], help="a ref or id expected in the slate")

    p = sub.add_parser("forget", help="remove units by ref or id")
    p.add_argument("refs", nargs="+")
    _project_args(p)

    _tokens_parser(sub)

    p = sub.add_parser("demo", help="load a sample history and run recalls through a real MCP client")
    p.add_argument("--home", type=Path, default=None, help="keep the demo store here (default: a temp dir)")

    _eval_parser(sub)
    return parser


def _tokens_parser(sub: Any) -> None:
    p = sub.add_parser("tokens", help="bearer tokens for `serve --http`")
    tokens = p.add_subparsers(dest="tokens_command", required=True)
    add = tokens.add_parser("add", help="make a token for NAME; prints its secret once")
    add.add_argument("name")
    add.add_argument("--projects", required=True,
                     help="comma-separated projects it may use; the first is its default")
    tokens.add_parser("list", help="show every token's name and projects (never a secret)")
    revoke = tokens.add_parser("revoke", help="remove a token; requests with it get 401 at once")
    revoke.add_argument("name")


def _eval_parser(sub: Any) -> None:
    from ..ranking.benchmarks import DATASETS  # noqa: PLC0415
    from ..ranking.evaluate import VARIANTS  # noqa: PLC0415
    p = sub.add_parser("eval", help="measure evidence selection on LoCoMo or LongMemEval files")
    p.add_argument("dataset", choices=DATASETS)
    p.add_argument("paths", nargs="+", type=Path, help="benchmark files or directories of them")
    p.add_argument("--variant", action="append", help=f"pipeline variant (repeatable): "
                   f"{', '.join(VARIANTS)} (default: bm25)")
    p.add_argument("--budget", action="append", type=int, help="token budget (repeatable; "
                   "default 2400, 2550, 2700)")
    p.add_argument("--pool-size", type=int, default=128)
    p.add_argument("--limit", type=int, default=None, help="evaluate a random sample of N questions")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="write one record per (variant, budget) here")
    p.add_argument("--per-question", type=Path, help="write evidence, pool and slate hits per question (JSONL)")
    p.add_argument("--plot", type=Path, help="plot slate completeness against budget (PNG)")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.verbose)
    try:
        return int(COMMANDS[args.command](args) or 0)
    except InputError as exc:
        print(f"agentmemrec: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:
        print(f"agentmemrec: {exc}", file=sys.stderr)
        return 1


def _memory(settings: Settings):  # noqa: ANN202 - SharedMemory; imported lazily for a fast --help
    from ..ranking.memory import RecallConfig  # noqa: PLC0415
    from .owner import SharedMemory  # noqa: PLC0415
    return SharedMemory(settings.home, RecallConfig(pool_size=settings.pool_size)).start()


def cmd_serve(args: argparse.Namespace) -> int:
    from .app import create_server  # noqa: PLC0415
    settings = Settings.load(args.project, args.allow, pool_size=args.pool_size, http=args.http,
                             max_request_bytes=args.max_request_bytes)
    server = create_server(settings)
    if args.http:
        server.run("streamable-http", host=args.host, port=args.port,
                   max_request_body_size=settings.max_request_bytes)
    else:
        server.run("stdio")
    return 0


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    items = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from exc
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            items.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{n}: not valid JSON ({exc.msg}); fix the line and retry") from exc
    return items


def import_items(memory: Any, project: str, items: list[dict[str, Any]], label: str = "import") -> int:
    """Validate everything first (nothing is written if a line is bad), then write in batches."""
    from tqdm import tqdm  # noqa: PLC0415
    from ..indexing.units import validate_item  # noqa: PLC0415
    for i, raw in enumerate(items):
        validate_item(raw, f"line {i + 1}")
    stored = 0
    with tqdm(total=len(items), desc=label, unit="item", file=sys.stderr, disable=None) as bar:
        for start in range(0, len(items), IMPORT_BATCH):
            batch = items[start:start + IMPORT_BATCH]
            stored += sum(r.outcome != "unchanged" for r in memory.remember(project, batch))
            # Each batch is one transaction: after an interruption, running the import again
            # stores the rest and leaves the batches already committed unchanged.
            log.info("%s: items %d-%d committed", label, start + 1, start + len(batch))
            bar.update(len(batch))
    return stored


def cmd_import(args: argparse.Namespace) -> int:
    settings = Settings.load(args.project)
    items = read_jsonl(args.file)
    memory = _memory(settings)
    try:
        changed = import_items(memory, settings.project, items)
    finally:
        memory.close()
    emit(f"{len(items)} items read, {changed} stored or updated in project {settings.project}")
    return 0


def cmd_recall(args: argparse.Namespace) -> int:
    from .app import slate_result  # noqa: PLC0415
    settings = Settings.load(args.project)
    memory = _memory(settings)
    try:
        slate = memory.recall(settings.project, args.query, args.budget, args.as_of)
    finally:
        memory.close()
    if args.json:
        emit(slate_result(slate).model_dump_json(indent=2))
    else:
        emit(slate.context, end="")
        emit(f"-- slate {slate.slate_id}: {len(slate.items)} items, {slate.tokens_used}/"
              f"{slate.budget} tokens (agentmemrec explain {slate.slate_id})")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    settings = Settings.load()
    memory = _memory(settings)
    try:  # the local CLI speaks for the store's owner: every project is visible to it
        payload = memory.explain(args.slate_id, frozenset(memory.projects()) | {settings.project},
                                 args.ref)
    finally:
        memory.close()
    emit(json.dumps(payload, indent=2, default=str))
    return 0


def cmd_forget(args: argparse.Namespace) -> int:
    settings = Settings.load(args.project)
    memory = _memory(settings)
    try:
        removed = memory.forget(settings.project, args.refs)
    finally:
        memory.close()
    emit(f"removed {len(removed)} units from project {settings.project}")
    return 0


def cmd_tokens(args: argparse.Namespace) -> int:
    from ..indexing.principals import hash_secret, new_secret  # noqa: PLC0415
    memory = _memory(Settings.load())
    try:
        if args.tokens_command == "add":
            secret = new_secret()
            principal = memory.call("tokens.add", args.name, hash_secret(secret),
                                    [p.strip() for p in args.projects.split(",") if p.strip()])
            emit(secret)
            log.info("token %r made for projects %s; its secret is shown this once", principal.name,
                     ",".join(principal.projects))
        elif args.tokens_command == "list":
            for p in memory.call("tokens.list"):
                emit(f"{p.name}\t{','.join(p.projects)}\t{p.created_at:%Y-%m-%d %H:%M}")
        else:
            memory.call("tokens.revoke", args.name)
            emit(f"revoked token {args.name}")
    finally:
        memory.close()
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo  # noqa: PLC0415
    return run_demo(args.home)


def cmd_eval(args: argparse.Namespace) -> int:
    from ..ranking import evaluate as ev  # noqa: PLC0415
    budgets = args.budget or list(ev.DEFAULT_BUDGETS)
    bad = [b for b in budgets if not 200 <= b <= 200_000]
    if bad:
        raise InputError(f"budgets must lie in [200, 200000]; got {bad}")
    per_q: list[dict[str, Any]] | None = [] if args.per_question else None
    runs, cost = ev.evaluate(args.dataset, args.paths, args.variant or ["bm25"], budgets,
                             args.limit, args.seed, args.pool_size, per_q)
    recs = ev.records(args.dataset, runs, cost)
    emit(f"dataset {args.dataset}: {cost['ingest_units']} units ingested in {cost['ingest_s']:.1f} s")
    emit(ev.format_table(recs))
    if args.json:
        args.json.write_text(json.dumps(recs, indent=2))
    if per_q is not None:
        args.per_question.write_text("".join(json.dumps(r) + "\n" for r in per_q))
    if args.plot:
        ev.plot(recs, args.plot)
    return 0


COMMANDS = {"serve": cmd_serve, "import": cmd_import, "recall": cmd_recall, "explain": cmd_explain,
            "forget": cmd_forget, "tokens": cmd_tokens, "demo": cmd_demo, "eval": cmd_eval}

if __name__ == "__main__":
    sys.exit(main())
