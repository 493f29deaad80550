"""What every command group shares: logging on stderr, the common flags, and the store."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from agentmemrec.server.console import complain, printable
from agentmemrec.server.hook_process import LOG_BYTES
from agentmemrec.server.owner_socket import private_home
from agentmemrec.server.settings import Settings


class PrintableFormatter(logging.Formatter):
    """Log lines name files and echo stored text: control characters are shown, not sent."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))


class LogFile(logging.StreamHandler):
    """Log lines on stderr, which goes to `path`, appended, with all else that reaches stderr (a
    traceback, a native library's message); past `max_bytes` the file moves to PATH.1 (the one
    there before is dropped) and stderr starts a new one, so a process that runs for days (the
    owner a hook starts) keeps at most about twice `max_bytes`."""

    def __init__(self, path: Path, max_bytes: int = LOG_BYTES) -> None:
        super().__init__(sys.stderr)
        self.path, self.max_bytes = path, max_bytes
        self._open()

    def _open(self) -> None:
        sys.stderr.flush()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.dup2(fd, sys.stderr.fileno())
        os.close(fd)

    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)
        try:  # after a whole record, under the handler's lock: no line is split between the files
            if os.fstat(sys.stderr.fileno()).st_size > self.max_bytes:
                with contextlib.suppress(FileNotFoundError):  # someone removed it: start a new one
                    self.path.replace(self.path.with_name(self.path.name + ".1"))
                self._open()
        except OSError:
            pass  # a log that cannot be rotated must not stop the process


def setup_logging(verbose: bool, log_file: Path | None = None) -> None:
    # stdout is the JSON-RPC stream in stdio mode: every log line goes to stderr.
    handler = logging.StreamHandler(sys.stderr) if log_file is None else LogFile(log_file)
    handler.setFormatter(PrintableFormatter("agentmemrec %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(handlers=[handler], level=logging.DEBUG if verbose else logging.INFO)
    logging.getLogger("bm25s").setLevel(logging.WARNING)


def store_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=None, metavar="URL",
                   help="a PostgreSQL URL, the team store (default: $AGENTMEMREC_STORE, else the "
                        "DuckDB file in $AGENTMEMREC_HOME)")


def project_args(p: argparse.ArgumentParser, allow: bool = False) -> None:
    """--project (and --allow for a server), with the store they live in."""
    store_arg(p)
    p.add_argument("--project", help="project to work on (default: $AGENTMEMREC_PROJECT, else the name of "
                                     "the git repository around the current folder, as setup and the hook "
                                     "use, else 'default')")
    if allow:
        p.add_argument("--allow", default="", help="other projects this server may serve, comma-separated")


def note_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--glob", action="append", default=None, metavar="PATTERN",
                   help="file names that are notes (repeatable; default *.md *.markdown *.mdx "
                        "*.rst *.txt)")


def redact_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-redact", action="store_true",
                   help="store secrets as they are (by default they become [REDACTED:<kind>])")


def transcript_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--project-map", type=Path, default=None,
                   help="JSON or TOML file mapping cwd prefixes to projects (claude-code)")
    p.add_argument("--include-sidechains", action="store_true",
                   help="also store subagent (sidechain) turns (claude-code)")


def inference_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--inference", default=None, metavar="URL[,URL]",
                   help="embed and cross-encode on these inference servers (text-embeddings-inference's "
                        "API, or `agentmemrec models serve`) instead of here (default: $AGENTMEMREC_INFERENCE)")


def device_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", help="where models run: auto, cpu or cuda, optionally "
                   ":fp32 or :fp16 (auto: FP16 on CUDA, FP32 on CPU)")


def at_least(low: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least `low`."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value
    return parse


positive = at_least(1)


def rerank_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rerank-limit", type=positive, default=None,
                   help="candidates the cross-encoder scores, where the ranker uses one (default: as many "
                        "as the ranker was trained with)")


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


def open_memory(settings: Settings, one_shot: bool = True):  # noqa: ANN201 - SharedMemory; lazily for a fast --help
    """The memory for a command; `one_shot=False` for one that runs on (`watch`), which embeds
    in the background what it writes, as a server does."""
    from agentmemrec.server.owner import shared_memory  # noqa: PLC0415
    at_close = embed_written if one_shot else None
    return shared_memory(settings, one_shot, at_close).start(raise_errors=True)  # said once, by main


def read_memory(settings: Settings):  # noqa: ANN201 - SharedMemory or EmptyMemory
    """The memory a command that only reads (`ls`, `show`, `stats`, `recall`) reads: `open_memory`'s,
    or, in a home whose DuckDB file does not exist yet, `EmptyMemory`, after a line on stderr that
    says so and how to add memory: a read must not make the store (nor take the owner lock). A
    home that could not hold one is refused as a write would be. A team store is always opened."""
    from agentmemrec.indexing.store.backends import database_file  # noqa: PLC0415
    database = database_file(settings.home)
    if settings.store is not None or database.exists():
        return open_memory(settings)
    private_home(settings.home, create=False)
    complain(f"nothing is stored yet in {database}; add memory with `agentmemrec import`, `watch` or "
             "`setup` (a client set up then remembers through its server)")
    return EmptyMemory()


class EmptyMemory:
    """What `SharedMemory` answers for a store that holds nothing, without one: no projects, no
    units, `show` refused as an empty store refuses it, and `recall` the slate of an empty project
    (its id is not saved: there is nothing to explain)."""

    def call(self, op: str, *args: Any) -> Any:
        if op == "show":
            from agentmemrec.ranking.views import show  # noqa: PLC0415
            return show(self, *args)  # the ref's checks, and "names no unit", as from a store
        return {"kinds": {}, "decisions": [], "notes": []}[op]

    def projects(self) -> dict[str, int]:
        return {}

    def recall(self, project: str, query: str, budget: int = 2700, as_of: str | None = None) -> Any:
        from agentmemrec.ranking.memory import EMPTY_PROJECT_NOTE, new_slate_id  # noqa: PLC0415
        from agentmemrec.ranking.render import SlateInputs  # noqa: PLC0415
        from agentmemrec.ranking.slate import build_slate  # noqa: PLC0415
        slate = build_slate(new_slate_id(), project, [], budget, SlateInputs({}, {}), 0.0, query)  # 0: nothing matched
        return replace(slate, notes=(EMPTY_PROJECT_NOTE.format(project),))

    def refresh(self, project: str) -> None:  # what `show` reads of a store
        pass

    def ids_for(self, project: str, ref_or_id: str) -> list[int]:
        return []

    def close(self) -> None:
        pass


def embed_written(memory: Any) -> None:
    """A command that wrote while it owned the store (no server runs to embed in the background)
    embeds what it wrote before it exits, with a progress bar on stderr, and not the rest of the
    project's backlog (a user who added one note would wait for all of it): one line says how
    many units that leaves for a server to embed. Not when ^C stopped it (what it wrote is
    stored: the next server embeds it)."""
    from tqdm import tqdm  # noqa: PLC0415
    pending, log = memory.pending_written(), logging.getLogger("agentmemrec")
    if pending and isinstance(sys.exc_info()[1], KeyboardInterrupt):
        log.warning("interrupted: what was written is stored, and %d units wait to be embedded by the next "
                    "server", sum(pending.values()))
        return
    if pending:
        with tqdm(total=sum(pending.values()), desc="embed", unit="unit", file=sys.stderr, mininterval=1.0) as bar:
            left = memory.embed_written(bar.update)
        if left:
            log.info("%d units not yet embedded stay pending (%s): a running server embeds them in the "
                     "background (agentmemrec serve or owner, or the owner a client's hook starts); until "
                     "then recall finds them by BM25", sum(left.values()),
                     ", ".join(f"{n} in {p}" for p, n in left.items()))
