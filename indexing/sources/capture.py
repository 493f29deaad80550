"""Claude Code transcripts into memory: one-off import and continuous capture.

Files and offsets around the pure converter in `transcripts.py`. Turns are keyed by the line's
uuid, so reading a line twice is harmless; the capture loop still remembers how far it read each
file (a small JSON file under the data directory, derived state that may be lost) so a restart
does not re-read every transcript, and reads only complete lines so a line being written is
taken on the next pass.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import anyio
from anyio.abc import TaskStatus
from watchfiles import Change

from agentmemrec.indexing.errors import InputError, StoreError
from agentmemrec.indexing.redact import MARKER
from agentmemrec.indexing.sources.fswatch import FileWatch, utf8_name
from agentmemrec.indexing.sources.sink import Ingested, Sink, batches
from agentmemrec.indexing.sources.transcripts import ProjectMap, TranscriptOptions, convert_line
from agentmemrec.indexing.units import MAX_BATCH

log = logging.getLogger(__name__)

DEFAULT_DIR = Path("~/.claude/projects")
LINE_BREAK = "\n"  # the only one in JSONL: Claude Code writes U+2028, U+2029 and U+0085 raw in strings


@dataclass(frozen=True)
class Target:
    """Where sessions go: `projects` None sends each to its own project; otherwise only
    sessions mapped to one of these projects are taken (the others count as other-project)."""

    projects: frozenset[str] | None = None
    project_map: ProjectMap = ProjectMap()
    options: TranscriptOptions = TranscriptOptions()


@dataclass(frozen=True)
class ImportReport:
    files: int = 0
    lines: int = 0
    stored: int = 0  # turns stored or updated
    unchanged: int = 0
    skipped: Mapping[str, int] = field(default_factory=dict)
    redactions: Mapping[str, int] = field(default_factory=dict)
    projects: Mapping[str, int] = field(default_factory=dict)  # turns per project
    elsewhere: Mapping[str, int] = field(default_factory=dict)  # turns of projects not taken
    cwds: Mapping[str, str] = field(default_factory=dict)  # a session folder of each of those

    def plus(self, other: "ImportReport") -> "ImportReport":
        def add(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
            return dict(Counter(a) + Counter(b))
        return ImportReport(self.files + other.files, self.lines + other.lines,
                            self.stored + other.stored, self.unchanged + other.unchanged,
                            add(self.skipped, other.skipped), add(self.redactions, other.redactions),
                            add(self.projects, other.projects), add(self.elsewhere, other.elsewhere),
                            {**other.cwds, **self.cwds})


def transcript_files(path: Path) -> list[Path]:
    """A .jsonl file, or every .jsonl file under a folder (subagent files included)."""
    path = Path(path).expanduser()
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise InputError(f"no transcripts at {path}: pass a .jsonl file or a folder of them "
                         f"(Claude Code writes to {DEFAULT_DIR})")
    return sorted(path.rglob("*.jsonl"))


def import_lines(sink: Sink, lines: Iterable[str], target: Target) -> ImportReport:
    """Convert lines, route each turn to its project, store them; nothing here is fatal."""
    skipped: Counter[str] = Counter()
    elsewhere: Counter[str] = Counter()
    cwds: dict[str, str] = {}
    groups: dict[str, dict[Any, dict[str, Any]]] = {}
    count = 0
    for line in lines:
        if not line.strip():
            continue
        count += 1
        turn = convert_line(line, target.options)
        if isinstance(turn, str):
            skipped[turn] += 1
            continue
        project = target.project_map.project_for(turn.cwd)
        if project is None:
            skipped["no-project"] += 1
        elif target.projects is not None and project not in target.projects:
            skipped["other-project"] += 1
            elsewhere[project] += 1
            cwds.setdefault(project, turn.cwd or "")
        else:  # a uuid seen twice is stored once
            groups.setdefault(project, {})[turn.item.get("ref") or id(turn)] = turn.item
    report = ImportReport(lines=count, skipped=dict(skipped), elsewhere=dict(elsewhere), cwds=cwds)
    for project, items in groups.items():
        report = report.plus(_store(sink, project, list(items.values())))
    return report


def _store(sink: Sink, project: str, items: list[dict[str, Any]]) -> ImportReport:
    stored = unchanged = refused = 0
    redactions: Counter[str] = Counter()
    for batch in batches(items, MAX_BATCH):
        for item in batch:  # a tool call is redacted before it is flattened: its markers count too
            redactions.update(MARKER.findall(item.get("text", "")))
        for done in _ingest(sink, project, list(batch)):
            if done is None:
                refused += 1
                continue
            stored += done.changed
            unchanged += len(done.results) - done.changed
            redactions.update(done.redactions)
    return ImportReport(stored=stored, unchanged=unchanged,
                        skipped={"refused": refused} if refused else {},
                        redactions=dict(redactions), projects={project: stored + unchanged})


def _ingest(sink: Sink, project: str, batch: list[dict[str, Any]]) -> list[Ingested | None]:
    """The whole batch; if the store refuses it, each item alone, so one bad line costs one."""
    try:
        return [sink.ingest(project, batch)]
    except InputError:
        out: list[Ingested | None] = []
        for item in batch:
            try:
                out.append(sink.ingest(project, [item]))
            except InputError as exc:  # e.g. a uuid some client already used for a decision
                log.warning("transcript turn not stored in %s: %s", project, exc)
                out.append(None)
        return out


def import_files(sink: Sink, files: Iterable[Path], target: Target,
                 progress: Callable[[Path, ImportReport], None] | None = None) -> ImportReport:
    total = ImportReport()
    for file in files:
        try:
            lines = file.read_text(encoding="utf-8", errors="replace").split(LINE_BREAK)
        except OSError as exc:
            log.warning("cannot read %s: %s", file, exc.strerror)
            lines = []
        report = import_lines(sink, lines, target)
        total = total.plus(ImportReport(files=1)).plus(report)
        if progress is not None:
            progress(file, report)
    return total


class Tail:
    """How far each transcript was read: complete lines only, offsets saved after storing."""

    def __init__(self, state_file: Path | None = None) -> None:
        self.state_file = state_file
        self.offsets: dict[str, tuple[int, int]] = self._load()

    def _load(self) -> dict[str, tuple[int, int]]:
        try:
            raw = json.loads(self.state_file.read_text()) if self.state_file else {}
            return {k: (int(v[0]), int(v[1])) for k, v in raw.items()}
        except (OSError, ValueError, TypeError, IndexError):
            return {}  # derived state: without it every line is read again, harmlessly

    def new_lines(self, file: Path) -> tuple[list[str], tuple[int, int] | None]:
        """The complete lines added since the last read, and the offset to save after them."""
        try:
            st = file.stat()
            inode, offset = self.offsets.get(str(file), (st.st_ino, 0))
            offset = offset if inode == st.st_ino and offset <= st.st_size else 0
            if offset == st.st_size:  # nothing new: not even opened (a failed watch reads all every few s)
                return [], (st.st_ino, offset)
            with file.open("rb") as fh:
                fh.seek(offset)
                data = fh.read()
        except OSError:
            return [], None
        end = data.rfind(b"\n") + 1
        return data[:end].decode("utf-8", errors="replace").split(LINE_BREAK), (st.st_ino, offset + end)

    def ingest(self, sink: Sink, files: Iterable[Path], target: Target) -> ImportReport:
        total = ImportReport()
        try:
            for file in files:
                lines, mark = self.new_lines(file)
                if lines:
                    total = total.plus(import_lines(sink, lines, target))
                if mark is not None:
                    self.offsets[str(file)] = mark
            self._save()
        except (StoreError, OSError) as exc:
            log.error("transcript capture: %s", exc)
        except Exception:  # noqa: BLE001 - a background task must not take the server down
            log.exception("transcript capture failed")
        return total

    def _save(self) -> None:
        if self.state_file is None:
            return
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        # a temporary file of its own: two servers of one project (two sessions in one repository)
        # capture together, and with a shared one each took the other's or found it gone
        tmp = self.state_file.with_name(f"{self.state_file.name}.{os.getpid()}.{id(self)}.tmp")
        tmp.write_text(json.dumps(self.offsets))
        os.replace(tmp, self.state_file)


def _is_transcript(change: Change, path: str) -> bool:
    """A transcript written, or a folder made or moved in (its files may give no events of their own:
    those a new session folder holds before the OS watches it, those of a folder moved in)."""
    return change != Change.deleted and (path.endswith(".jsonl") or Path(path).is_dir())


async def capture_claude_code(sink: Sink, folder: Path, target: Target, state_file: Path | None = None,
                              *, on_sync: Callable[[ImportReport], None] | None = None,
                              task_status: TaskStatus[ImportReport] = anyio.TASK_STATUS_IGNORED
                              ) -> None:
    """Store new transcript lines as they are written, until cancelled. The first pass of each watch
    (once the OS watch is live) catches up with everything written while nothing captured, and so
    does a pass after the watch failed (`FileWatch`)."""
    tail, started, warned = Tail(state_file), False, set[Path]()
    folder = Path(folder).expanduser().resolve()  # offsets are keyed by the paths events name
    watch = FileWatch(folder, _is_transcript, "transcript capture")

    async def take(paths: list[Path]) -> None:
        nonlocal started
        report = await anyio.to_thread.run_sync(tail.ingest, sink, _watchable(paths, warned), target)
        if not started:
            started = True
            task_status.started(report)
        elif on_sync is not None and report.stored:
            on_sync(report)

    while True:
        async with watch.events() as watching:
            fresh = True
            async for changes in watching:
                if fresh or changes:
                    await take([folder] if fresh else sorted({Path(p) for _, p in changes}))
                    fresh = False
        await take([folder])  # the watch failed: what it missed (it may fail each time it starts)
        await watch.pause()


def _watchable(paths: Iterable[Path], warned: set[Path]) -> list[Path]:
    """The transcripts at or under `paths` (folders: made or moved in, their files may give no events of
    their own), but none named in bytes that are not UTF-8, in its name or a folder's: reading one, or
    listing such a folder, makes the watch fail. Each of those is named once, as a warning."""
    found, odd = [], []
    for path in paths:
        if not utf8_name(str(path)):
            odd.append(path)
        elif not path.is_dir():
            found.append(path)
            continue
        for here, folders, files in os.walk(path) if utf8_name(str(path)) else ():
            odd += [Path(here, name) for name in folders if not utf8_name(name)]
            folders[:] = sorted(name for name in folders if utf8_name(name))
            for name in (name for name in files if name.endswith(".jsonl")):
                (found if utf8_name(name) else odd).append(Path(here, name))
    for path in sorted(set(odd) - warned):
        warned.add(path)
        log.warning("transcript capture: %s not read: its name is not UTF-8, which the file-system watch "
                    "cannot name (`agentmemrec import claude-code` reads it)", path)
    return sorted(set(found))
