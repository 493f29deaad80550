"""The `agentmemrec` command line: serve, import, watch, recall, explain, forget, tokens, models,
train, demo, eval.

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
from ..ranking.candidates import DEFAULT_POOL
from .console import emit
from .settings import MAX_REQUEST_BYTES, Settings, watch_folders

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


def _note_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--glob", action="append", default=None, metavar="PATTERN",
                   help="file names that are notes (repeatable; default *.md *.markdown *.mdx "
                        "*.rst *.txt)")


def _redact_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-redact", action="store_true",
                   help="store secrets as they are (by default they become [REDACTED:<kind>])")


def _transcript_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--project-map", type=Path, default=None,
                   help="JSON or TOML file mapping cwd prefixes to projects (claude-code)")
    p.add_argument("--include-sidechains", action="store_true",
                   help="also store subagent (sidechain) turns (claude-code)")


def _serve_source_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--watch", action="append", default=[], metavar="DIR",
                   help="keep this folder's notes and ADRs in the project (repeatable)")
    _note_args(p)
    _redact_arg(p)
    p.add_argument("--capture-claude-code", action="store_true",
                   help="store Claude Code sessions of the served projects as they are written")
    p.add_argument("--claude-dir", type=Path, default=None,
                   help="where Claude Code keeps transcripts (default ~/.claude/projects)")
    _transcript_args(p)


def _source_parsers(sub: Any) -> None:
    p = sub.add_parser("import", help="import a JSONL file of remember items, or Claude Code "
                       "transcripts: import claude-code [DIR]")
    p.add_argument("file", type=Path, metavar="FILE|claude-code",
                   help="a JSONL file, one remember item per line; or the word claude-code")
    p.add_argument("dir", type=Path, nargs="?", default=None,
                   help="claude-code: a transcript folder or file (default ~/.claude/projects)")
    _project_args(p)
    _transcript_args(p)
    _redact_arg(p)

    p = sub.add_parser("watch", help="keep a folder's notes and ADRs in a project")
    p.add_argument("folder", type=Path)
    _project_args(p)
    _note_args(p)
    p.add_argument("--once", action="store_true", help="reconcile once and exit")
    _redact_arg(p)


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
    p.add_argument("--pool-size", type=int, default=DEFAULT_POOL, help=f"candidates ranked (default {DEFAULT_POOL}; 0: the whole history)")
    p.add_argument("--device", default="auto", help="where models run: auto, cpu or cuda, optionally :fp32 or :fp16 (auto: FP16 on CUDA, FP32 on CPU)")
    p.add_argument("--ranker-model", type=Path, default=None, help="ranker model file (default: shipped)")

    _serve_source_args(p)
    _source_parsers(sub)

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

    p = sub.add_parser("models", help="install and list ONNX models")
    msub = p.add_subparsers(dest="models_command", required=True)
    m = msub.add_parser("install", help="export a Hugging Face model to ONNX and make it active")
    m.add_argument("source", help="hub id (e.g. BAAI/bge-m3) or local model directory")
    m.add_argument("--as", dest="role", default="embedder", choices=["embedder", "reranker"])
    m.add_argument("--quantize", choices=["int8"], default=None)
    m.add_argument("--pooling", choices=["cls", "mean"], default=None,
                   help="embedders: override the detected pooling")
    m.add_argument("--max-length", type=int, default=None)
    m.add_argument("--name", default=None, help="name under the models dir (default: from the source)")
    msub.add_parser("list", help="installed models, which are active, and where they run")
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
    p.add_argument("--pool-size", type=int, default=DEFAULT_POOL, help=f"candidates ranked (default {DEFAULT_POOL}; 0: the whole history)")
    p.add_argument("--limit", type=int, default=None, help="evaluate a random sample of N questions")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="write one record per (variant, budget) here")
    p.add_argument("--per-question", type=Path, help="write evidence, pool and slate hits per question (JSONL)")
    p.add_argument("--plot", type=Path, help="plot slate completeness against budget (PNG)")
    p.add_argument("--device", default="auto", help="where models run: auto, cpu or cuda, optionally :fp32 or :fp16 (auto: FP16 on CUDA, FP32 on CPU)")
    p.add_argument("--rerank-limit", type=int, default=None,
                   help="candidates the cross-encoder scores (default: 24 on CPU, 128 on GPU)")
    p.add_argument("--no-cache", action="store_true",
                   help="do not reuse embeddings cached under $AGENTMEMREC_HOME/cache")
    p.add_argument("--ranker-model", type=Path, default=None,
                   help="ranker model file for the full variant (default: the shipped one)")
    p.add_argument("--cv", type=int, default=0, metavar="K",
                   help="cross-validate the full variant: train on K-1 folds, rank the K-th")
    p.add_argument("--ablation", action="store_true",
                   help="with --cv: also the full variant without each feature group")

    p = sub.add_parser("train", help="train the LambdaRank ranker on benchmark data")
    p.add_argument("dataset", choices=DATASETS)
    p.add_argument("paths", nargs="+", type=Path)
    p.add_argument("--also", nargs="+", action="append", default=[], metavar="DATASET_OR_PATH",
                   help="another dataset and its paths, e.g. --also longmemeval DIR")
    p.add_argument("--out", type=Path, required=True, help="where to write the model file")
    p.add_argument("--pool-size", type=int, default=DEFAULT_POOL, help=f"candidates ranked (default {DEFAULT_POOL}; 0: the whole history)")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", help="where models run: auto, cpu or cuda, optionally :fp32 or :fp16")
    p.add_argument("--rerank-limit", type=int, default=None)


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


def source_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings of watched notes, transcripts and redaction, from whichever flags exist."""
    extra: dict[str, Any] = {"redact": not getattr(args, "no_redact", False)}
    if getattr(args, "glob", None):
        extra["note_globs"] = tuple(args.glob)
    if getattr(args, "claude_dir", None):
        extra["claude_dir"] = args.claude_dir
    if getattr(args, "project_map", None):
        extra["project_map"] = args.project_map
    extra["include_sidechains"] = getattr(args, "include_sidechains", False)
    return extra


def serve_settings(args: argparse.Namespace) -> Settings:
    return Settings.load(args.project, args.allow, pool_size=args.pool_size, device=args.device,
                         ranker_model=args.ranker_model, http=args.http,
                         max_request_bytes=args.max_request_bytes, watch=watch_folders(args.watch),
                         capture_claude_code=args.capture_claude_code, **source_settings(args))


def _memory(settings: Settings):  # noqa: ANN202 - SharedMemory; imported lazily for a fast --help
    from .owner import shared_memory  # noqa: PLC0415
    return shared_memory(settings).start()


def cmd_serve(args: argparse.Namespace) -> int:
    from .app import create_server  # noqa: PLC0415
    settings = serve_settings(args)
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
    with tqdm(total=len(items), desc=label, unit="item", file=sys.stderr, disable=False, mininterval=1.0) as bar:
        for start in range(0, len(items), IMPORT_BATCH):
            batch = items[start:start + IMPORT_BATCH]
            stored += sum(r.outcome != "unchanged" for r in memory.remember(project, batch))
            # Each batch is one transaction: after an interruption, running the import again
            # stores the rest and leaves the batches already committed unchanged.
            log.info("%s: items %d-%d committed", label, start + 1, start + len(batch))
            bar.update(len(batch))
    return stored


def cmd_import(args: argparse.Namespace) -> int:
    if str(args.file) == "claude-code":  # a file of that name: pass ./claude-code
        return cmd_import_claude_code(args)
    if args.dir is not None:
        raise InputError(f"import takes one JSONL file; {args.dir} is extra "
                         "(use 'import claude-code DIR' for transcripts)")
    settings = Settings.load(args.project, **source_settings(args))
    items = read_jsonl(args.file)
    memory = _memory(settings)
    try:
        changed = import_items(memory, settings.project, items)
    finally:
        memory.close()
    emit(f"{len(items)} items read, {changed} stored or updated in project {settings.project}")
    return 0


def cmd_import_claude_code(args: argparse.Namespace) -> int:
    from .sources import import_claude_code, import_summary  # noqa: PLC0415
    settings = Settings.load(args.project, **source_settings(args))
    memory = _memory(settings)
    try:
        report = import_claude_code(memory, settings, args.dir, args.project)
    finally:
        memory.close()
    for line in import_summary(report):
        emit(line)
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    from .sources import run_watch  # noqa: PLC0415
    settings = Settings.load(args.project, **source_settings(args))
    [folder] = watch_folders([args.folder])
    memory = _memory(settings)
    try:
        return run_watch(memory, settings, folder, args.once, emit)
    finally:
        memory.close()


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


def _ranker_model(path: Path | None) -> Any:
    from ..ranking.learned import RankerModel  # noqa: PLC0415
    return RankerModel.load(path) if path else None


def _cross_validated(args: argparse.Namespace, kept: list[Any], budgets: list[int],
                     per_q: list[dict[str, Any]] | None) -> list[Any]:
    from ..ranking.features import GROUPS  # noqa: PLC0415
    from ..ranking.train import cross_validate, to_group  # noqa: PLC0415
    groups = [to_group(k) for k in kept]
    by_case = args.dataset == "locomo"
    runs = [cross_validate(groups, "full", budgets, args.cv, by_case, seed=args.seed, per_question=per_q)]
    if args.ablation:
        for name, feats in GROUPS.items():
            runs.append(cross_validate(groups, f"full-no-{name}", budgets, args.cv, by_case,
                                       [f.__name__ for f in feats], args.seed))
    return runs


def _describe(dataset: str, paths: list[Path]) -> str:
    from ..ranking.benchmarks import files_under  # noqa: PLC0415
    files = files_under(paths)
    return f"{dataset}: {len(files)} files, {files[0].name} .. {files[-1].name}"


def cmd_train(args: argparse.Namespace) -> int:
    from ..ranking import evaluate as ev  # noqa: PLC0415
    from ..ranking.train import to_group, train_model  # noqa: PLC0415
    sources = [(args.dataset, args.paths)] + [(a[0], [Path(p) for p in a[1:]]) for a in args.also]
    home = Settings.load().home
    models = ev.load_models(home, ["full"], args.device, args.rerank_limit, True)
    if models.embedder is None:
        raise InputError(models.missing)
    groups = []
    for dataset, paths in sources:
        kept: list[Any] = []
        ev.evaluate(dataset, paths, [], [2700], args.limit, args.seed, args.pool_size, None,
                    models, kept.append)
        groups += [to_group(k) for k in kept]
    model = train_model(groups, [_describe(d, p) for d, p in sources],
                        models.embedder.identity, models.reranker.identity if models.reranker else None,
                        args.seed)
    model.save(args.out)
    emit(f"trained on {len(groups)} questions; best iteration {model.meta['metrics']['best_iteration']}, "
         f"validation {model.meta['metrics']['valid']}; written to {args.out}")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from ..indexing import models  # noqa: PLC0415
    from ..indexing.onnx_runtime import plan_session  # noqa: PLC0415
    home = Settings.load().home
    if args.models_command == "install":
        manifest = models.install(home, models.resolve_source(args.source), args.role, args.quantize,
                                  args.pooling, args.max_length, args.name)
        emit(f"installed {manifest.identity} as the active {manifest.role} "
             f"({manifest.pooling or 'logit'}, dim {manifest.dim}, max length {manifest.max_length}, "
             f"{'FP16 copy for CUDA' if manifest.fp16_file else 'int8, CPU only'})")
        return 0
    active = models.active(home)
    found = models.installed(home)
    if not found:
        emit(f"no models installed under {models.models_dir(home)}; install one with:\n  {models.INSTALL_HINT}")
    for m in found:
        mark = "*" if (active.get(m.role) and active[m.role].name == m.name) else " "
        plan = plan_session("auto", m)
        emit(f"{mark} {m.role:<9} {m.identity:<40} {m.pooling or '-':<5} dim {m.dim:<5} "
             f"max {m.max_length:<5} runs on {plan.device} at {plan.precision}  ({m.source})")
    for role in models.ROLES:
        if active.get(role) is None:
            emit(f"  no active {role}: agentmemrec models install ... --as {role}")
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
    variants = ev.check_variants(args.variant or ["bm25"])
    ranker_model = _ranker_model(args.ranker_model)
    models = ev.load_models(Settings.load().home, variants, args.device, args.rerank_limit,
                            not args.no_cache, ranker_model)
    cv = args.cv and "full" in variants
    kept: list[Any] = []
    runs, cost = ev.evaluate(args.dataset, args.paths, [v for v in variants if not (cv and v == "full")],
                             budgets, args.limit, args.seed, args.pool_size, per_q, models,
                             kept.append if cv else None)
    if cv:
        runs += _cross_validated(args, kept, budgets, per_q)
    recs = ev.records(args.dataset, runs, cost)
    emit(f"dataset {args.dataset}: {cost['ingest_units']} units ingested in {cost['ingest_s']:.1f} s, "
         f"{cost['embed_units']} embedded in {cost['embed_s']:.1f} s")
    emit(ev.format_table(recs))
    if args.json:
        args.json.write_text(json.dumps(recs, indent=2))
    if per_q is not None:
        args.per_question.write_text("".join(json.dumps(r) + "\n" for r in per_q))
    if args.plot:
        ev.plot(recs, args.plot)
    return 0


COMMANDS = {"serve": cmd_serve, "import": cmd_import, "watch": cmd_watch, "recall": cmd_recall,
            "explain": cmd_explain, "forget": cmd_forget, "tokens": cmd_tokens, "demo": cmd_demo,
            "eval": cmd_eval, "train": cmd_train, "models": cmd_models}

if __name__ == "__main__":
    sys.exit(main())
