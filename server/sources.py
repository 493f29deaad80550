"""Memory that follows the files: the note watcher and Claude Code capture, wired to settings.

`background_sources` runs them as tasks inside the server's lifespan, sharing its store (through `SharedMemory`, so any process may run them);
`run_watch` and `import_claude_code` are the CLI's `watch` and `import claude-code`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable, Mapping

import anyio

from agentmemrec.indexing.sources.capture import (
    ImportReport,
    Target,
    capture_claude_code,
    import_files,
    transcript_files,
)
from agentmemrec.indexing.sources.notes import NoteRules
from agentmemrec.indexing.sources.sink import Sink
from agentmemrec.indexing.sources.transcripts import ProjectMap, TranscriptOptions
from agentmemrec.indexing.sources.watcher import NoteWatcher, SyncReport, watch_notes
from agentmemrec.server.settings import Settings

log = logging.getLogger("agentmemrec")


def note_rules(settings: Settings) -> NoteRules:
    return NoteRules(globs=settings.note_globs)


def capture_target(settings: Settings, projects: frozenset[str] | None) -> Target:
    return Target(projects, ProjectMap.load(settings.project_map),
                  TranscriptOptions(include_sidechains=settings.include_sidechains, redact=settings.redact))


CLAUDE_DIR_POLL_S = 2.0  # how often a server looks for a Claude Code folder not yet made


def capture_state(settings: Settings, projects: frozenset[str]) -> Path:
    """The read offsets of a capture for these projects. A server reads every transcript but
    stores only its projects' sessions, so each set of projects keeps its own offsets: a server for
    one repository must not mark another repository's sessions as read for that one's server."""
    key = ",".join(sorted(projects))
    name = key if len(key) <= 96 else hashlib.sha256(key.encode()).hexdigest()[:16]
    return settings.home / "capture" / f"claude-code.{name}.json"


@asynccontextmanager
async def background_sources(settings: Settings, memory: Sink) -> AsyncIterator[None]:
    """Watch the configured folders and capture transcripts while the server runs."""
    if not settings.watch and not settings.capture_claude_code:
        yield
        return
    async with anyio.create_task_group() as tg:
        for folder in settings.watch:
            log.info("watching %s: its notes and ADRs (%s) go to project %s", folder,
                     " ".join(settings.note_globs), settings.project)
            tg.start_soon(_guarded, f"watching {folder}", partial(
                watch_notes, memory, settings.project, folder, note_rules(settings)))
        if settings.capture_claude_code:
            tg.start_soon(_guarded, "Claude Code capture", partial(_capture, settings, memory))
        try:
            yield
        finally:
            tg.cancel_scope.cancel()


async def _capture(settings: Settings, memory: Sink) -> None:
    """Capture as sessions are written; on a new install the server may start before Claude Code
    has made its folder, so capture starts when the folder appears."""
    claude_dir = settings.claude_dir.expanduser()
    if not claude_dir.is_dir():
        log.info("no Claude Code transcripts at %s yet; capture starts when the folder appears", claude_dir)
        while not claude_dir.is_dir():
            await anyio.sleep(CLAUDE_DIR_POLL_S)
    log.info("capturing Claude Code sessions from %s for projects %s", claude_dir, ",".join(sorted(settings.allowed)))
    await capture_claude_code(memory, claude_dir, capture_target(settings, settings.allowed),
                              capture_state(settings, settings.allowed))


async def _guarded(what: str, task: Callable[[], Awaitable[None]]) -> None:
    """A source that fails stops alone, logged; the server keeps serving."""
    try:
        await task()
    except Exception:  # noqa: BLE001 - cancellation is not an Exception and still propagates
        log.exception("%s stopped", what)


def watch_summary(folder: Path, report: SyncReport) -> str:
    line = (f"{folder}: {report.written} written, {report.renamed} renamed, "
            f"{report.forgotten} removed")
    return line + (f", {len(report.failed)} failed" if report.failed else "")


def run_watch(memory: Sink, settings: Settings, folder: Path, once: bool,
              emit: Callable[[str], None]) -> int:
    """`agentmemrec watch`: one reconciliation, then (unless `once`) every change until ^C. The
    command prints each summary itself, so the watcher's own summary line is not logged too
    (unless -v asks for every detail)."""
    watcher_log = logging.getLogger("agentmemrec.indexing.sources.watcher")
    level = watcher_log.level
    if not watcher_log.isEnabledFor(logging.DEBUG):
        watcher_log.setLevel(logging.WARNING)
    try:
        return _watch(memory, settings, folder, once, emit)
    finally:
        watcher_log.setLevel(level)


def _watch(memory: Sink, settings: Settings, folder: Path, once: bool, emit: Callable[[str], None]) -> int:
    if once:
        report = NoteWatcher(memory, settings.project, folder, note_rules(settings)).handle()
        emit(watch_summary(folder, report))
        return 1 if report.failed else 0

    async def loop() -> None:
        async with anyio.create_task_group() as tg:
            first = await tg.start(lambda task_status: watch_notes(
                memory, settings.project, folder, note_rules(settings),
                on_sync=lambda r: emit(watch_summary(folder, r)), task_status=task_status))
            emit(watch_summary(folder, first) + f"; watching for changes (project {settings.project})")

    try:
        anyio.run(loop)
    except KeyboardInterrupt:
        pass
    return 0


def import_claude_code(memory: Sink, settings: Settings, source: Path | None,
                       project: str | None) -> ImportReport:
    """`agentmemrec import claude-code`: every transcript under `source`, with a progress bar."""
    from tqdm import tqdm  # noqa: PLC0415
    files = transcript_files(source or settings.claude_dir)
    target = capture_target(settings, frozenset({project}) if project else None)
    with tqdm(total=len(files), desc="claude-code", unit="file", file=sys.stderr, disable=None) as bar:
        return import_files(memory, files, target, progress=lambda _file, _report: bar.update(1))


def tally(verb: str, counts: Mapping[str, int], noun: str) -> str:
    """`redacted 3 secrets: github-token 1, secret-assignment 2`: a total and its parts by kind."""
    parts = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    return f"{verb} {sum(counts.values())} {noun}" + (f": {parts}" if parts else "")


def import_summary(report: ImportReport, project: str | None = None) -> list[str]:
    projects = ", ".join(f"{p} {n}" for p, n in sorted(report.projects.items())) or "none"
    lines = [f"{report.files} files, {report.lines} lines read, {report.stored} turns stored or "
             f"updated, {report.unchanged} unchanged; turns by project: {projects}"]
    lines.append(tally("skipped", report.skipped, "lines"))
    lines.append(tally("redacted", report.redactions, "secrets"))
    if report.elsewhere and project:
        lines.extend(_elsewhere_hint(report, project))
    return lines


def _elsewhere_hint(report: ImportReport, project: str) -> list[str]:
    """Where the sessions not taken belong, and how to take them: the usual surprise is a
    repository whose folder name is not the project's name."""
    found = sorted(report.elsewhere.items(), key=lambda kv: -kv[1])
    lines = ["sessions of other projects were left out: " + ", ".join(
        f"{p} {n} turns (from {report.cwds.get(p) or 'an unknown folder'})" for p, n in found)]
    example = json.dumps({report.cwds.get(p) or "/path/to/repository": project for p, _ in found[:2]})
    lines.append(f"to store them in {project}, map their folders in a project map file, e.g. "
                 f"{example}, and pass --project-map FILE; or import without --project to store "
                 "each session in the project it maps to")
    return lines
