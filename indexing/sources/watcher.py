"""The note watcher: files in a folder kept in step with a project's `note` and `decision` units.

The logic is one pure function, `reconcile`: from the notes as read (`Doc`s) and what the store
holds for this folder, to the ingest actions (renames, writes, forgets). Everything else is an
adapter around it: `NoteWatcher` turns watchfiles' change sets into re-read documents and applies
the plan, and `watch_notes` is the awatch loop. The first pass and every restart run the same
reconciliation, so changes made while nothing watched are picked up and nothing is duplicated.

The watcher owns the units whose ref starts with `file:` (notes: `file:<path>`) or `adr:`
(decisions from ADRs) and whose path lies under the watched folder; notes that clients write
through `remember` are keyed by their plain path and are never touched.
"""

from __future__ import annotations

import logging
import stat
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import anyio
from anyio.abc import TaskStatus
from watchfiles import Change

from agentmemrec.indexing.errors import InputError, StoreError
from agentmemrec.indexing.sources.adr import assign_refs, decision_item, resolve_links
from agentmemrec.indexing.sources.fswatch import WAKE_MS, FileWatch
from agentmemrec.indexing.sources.notes import (
    Doc,
    Ignores,
    NoteRules,
    Skip,
    Tree,
    classify,
    ignores_above,
    links_to_note,
    read_doc,
    skip_reason,
    walk,
)
from agentmemrec.indexing.sources.sink import Ingested, Sink, batches
from agentmemrec.indexing.store.protocol import SourceRow
from agentmemrec.indexing.units import MAX_BATCH, content_hash, validate_item

log = logging.getLogger(__name__)

NOTE_PREFIX, ADR_PREFIX = "file:", "adr:"
OWNED_PREFIXES = (NOTE_PREFIX, ADR_PREFIX)
EMPTY_GRACE_S = 2.0  # a note read empty counts as emptied once it stays so this long (`settle`)


@dataclass(frozen=True)
class Rename:
    old_ref: str
    new_ref: str
    path: str


@dataclass(frozen=True)
class Plan:
    """Ingest actions, applied in this order: renames (keep unit ids), writes, forgets."""

    renames: tuple[Rename, ...] = ()
    writes: tuple[dict[str, Any], ...] = ()
    forgets: tuple[SourceRow, ...] = ()
    invalid: tuple[str, ...] = ()  # paths whose item the store would refuse


def desired_items(docs: Mapping[str, Doc]) -> dict[str, dict[str, Any]]:
    """ref -> remember item for every document: notes as `file:<path>` notes, ADRs as
    decisions with their status and resolved supersession links."""
    adrs = {path: doc.adr for path, doc in docs.items() if doc.adr is not None}
    refs = assign_refs(adrs)
    links = resolve_links(adrs, refs)
    items = {}
    for path, doc in sorted(docs.items()):
        if doc.adr is None:
            items[NOTE_PREFIX + path] = {"kind": "note", "ref": NOTE_PREFIX + path, "path": path,
                                         "text": doc.text}
        else:
            items[refs[path]] = decision_item(path, doc.adr, refs[path], links.get(path))
    return items


def item_hash(raw: Mapping[str, Any]) -> str:
    """The content hash the store will compute for this item (InputError if it would refuse it)."""
    return content_hash(validate_item(dict(raw)))


def reconcile(docs: Mapping[str, Doc], stored: Mapping[str, SourceRow]) -> Plan:
    """What to do so the store holds exactly the documents: write what is new or changed,
    forget what has no file any more, and rename in place an item whose file moved with its
    content unchanged (same kind, and the same hash once given the old path)."""
    wanted, hashes, invalid = {}, {}, []
    for ref, raw in desired_items(docs).items():
        try:
            hashes[ref], wanted[ref] = item_hash(raw), raw
        except InputError as exc:
            invalid.append(f"{raw['path']}: {exc}")
    orphans = {ref: row for ref, row in stored.items() if ref not in wanted}
    renames = []
    for ref in (r for r in wanted if r not in stored):
        moved = _moved_from(wanted[ref], orphans)
        if moved is not None:
            renames.append(Rename(moved, ref, wanted[ref]["path"]))
            del orphans[moved]
    writes = [raw for ref, raw in wanted.items()
              if ref not in stored or stored[ref].content_hash != hashes[ref]]
    return Plan(tuple(renames), tuple(_dependency_order(writes)),
                tuple(orphans[ref] for ref in sorted(orphans)), tuple(invalid))


def _moved_from(raw: Mapping[str, Any], orphans: Mapping[str, SourceRow]) -> str | None:
    for ref, row in orphans.items():
        if row.kind == raw["kind"] and item_hash({**raw, "path": row.path}) == row.content_hash:
            return ref
    return None


def _dependency_order(writes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Notes, then decisions with each one's predecessor first, so even one-by-one writes
    never name a decision that is not stored yet."""
    by_ref = {w["ref"]: w for w in writes}
    out: list[dict[str, Any]] = []
    placed: set[str] = set()

    def place(item: dict[str, Any]) -> None:
        if item["ref"] in placed:
            return
        placed.add(item["ref"])
        if item.get("supersedes") in by_ref:
            place(by_ref[item["supersedes"]])
        out.append(item)

    for item in sorted(writes, key=lambda w: (w["kind"] == "decision", w["ref"])):
        place(item)
    return out


@dataclass(frozen=True)
class SyncReport:
    """What one pass did."""

    written: int = 0
    renamed: int = 0
    forgotten: int = 0
    failed: tuple[str, ...] = ()
    redactions: Mapping[str, int] = field(default_factory=dict)
    paths: tuple[str, ...] = ()  # paths written, renamed to or forgotten

    @property
    def changed(self) -> bool:
        return bool(self.written or self.renamed or self.forgotten)


class NoteWatcher:
    """The stateful adapter: the documents as last read, re-read on change, reconciled with the
    store after every batch. Its methods block; the async loop runs them in a worker thread."""

    def __init__(self, sink: Sink, project: str, folder: Path | str,
                 rules: NoteRules = NoteRules()) -> None:
        if not Path(folder).is_dir():
            raise InputError(f"cannot watch {folder}: not a directory")
        self.sink, self.project, self.rules = sink, project, rules
        self.tree = Tree.of(folder)
        self.docs: dict[str, Doc] = {}
        self._skipped: set[tuple[str, str]] = set()
        self._stale = True  # the store may differ from the documents: reconcile on the next pass
        self._emptied: dict[str, tuple[float, str]] = {}  # note read empty -> (when, its path)
        self._refused: set[str] = set()  # files and folders ('/' ends them) it may not read: their notes are kept

    def handle(self, changes: Iterable[tuple[Change, str]] | None = None, settled: bool = False) -> SyncReport:
        """A full scan (changes None, or a .gitignore changed) or a batch of changes, then
        the reconciliation. Errors are logged, never raised: the watcher outlives a bad pass.
        `settled`: a note read empty is empty, not half-way through a save (see `settle`)."""
        try:
            before = self.docs
            changes = None if changes is None else set(changes)
            if changes is None or any(Path(p).name == ".gitignore" for _, p in changes):
                self._refused.clear()
                self.docs = self._read_all(self.tree.scope)
                self._emptied.clear()
            else:
                for _, path in sorted(changes, key=lambda c: c[1]):
                    self._reread(path, settled)
                if self.docs == before and not self._stale:  # saved unchanged, or not a note
                    return SyncReport()
            self._stale = True
            report = self._apply(self._plan())
            self._stale = False
            return report
        except (StoreError, OSError, InputError) as exc:
            log.error("note watcher %s: %s", self.tree.folder, exc)
            return SyncReport(failed=(str(exc),))
        except Exception as exc:  # noqa: BLE001 - a background task must not take the server down
            log.exception("note watcher %s failed", self.tree.folder)
            return SyncReport(failed=(repr(exc),))

    def wants(self, _change: Change, path: str) -> bool:
        """watchfiles' filter: notes, .gitignore files and folders, outside hidden and build
        folders (so .git churn never wakes the watcher)."""
        rel = self.tree.rel(path)
        if rel is None:
            return False
        if Path(path).name == ".gitignore":
            return not any(self.rules.folder_skip(part) for part in rel.split("/")[:-1])
        reason = classify(rel, self.rules, Ignores())
        if reason != "not-a-note":
            return reason is None
        return Path(path).is_dir() or any(p.startswith(rel + "/") for p in self.docs)

    def _read_all(self, under: str) -> dict[str, Doc]:
        docs = {}
        for rel, found in walk(self.tree, self.rules, under):
            doc = found if isinstance(found, str) else self._read(rel, found)
            if isinstance(doc, Doc):
                docs[rel] = doc
            else:
                self._skip(rel, doc)
        return docs

    def settle(self) -> SyncReport:
        """Notes read empty EMPTY_GRACE_S ago and not written since are empty: reconcile them. A
        save that truncates the file and then writes it (some editors, `open(p, 'w')`) leaves it
        empty for a moment, and removing the note then would store it again with new ids."""
        now = time.monotonic()
        due = [path for rel, (when, path) in self._emptied.items() if now - when >= EMPTY_GRACE_S]
        if not due:
            return SyncReport()
        return self.handle([(Change.modified, path) for path in due], settled=True)

    def _reread(self, path: str, settled: bool = False) -> None:
        rel = self.tree.rel(path)
        if rel is None:
            return
        kept = self.docs.get(rel)
        self._emptied.pop(rel, None)
        self.docs = {p: d for p, d in self.docs.items() if p != rel and not p.startswith(rel + "/")}
        self._refused = {p for p in self._refused if p != rel and not p.startswith(rel + "/")}
        if self._through_folder_link(Path(path)):  # the OS watch enters a folder link; the scan does not
            return
        if Path(path).is_dir():  # a folder created or moved in: its files gave no events
            self.docs.update(self._read_all(rel + "/"))
        elif Path(path).is_file():
            reason = classify(rel, self.rules, ignores_above(self.tree, rel))
            doc = reason or self._read(rel, Path(path))
            if doc == "empty" and kept is not None and not settled:  # maybe half-way through a save
                self.docs[rel] = kept
                self._emptied[rel] = (time.monotonic(), path)
            elif isinstance(doc, Doc):
                self.docs[rel] = doc
            else:
                self._skip(rel, doc)

    def _through_folder_link(self, path: Path) -> bool:
        """Whether `path` is a link to a folder or lies under one (below the watched folder)."""
        above = [p for p in path.parents if p.is_relative_to(self.tree.folder) and p != self.tree.folder]
        return (path.is_symlink() and path.is_dir()) or any(p.is_symlink() for p in above)

    def _read(self, rel: str, file: Path) -> Doc | Skip:
        if links_to_note(self.tree, self.rules, file):  # stored once, under the target's path
            return "link-to-a-note"
        return read_doc(rel, file, self.rules, self.sink.redact, self.tree)

    def _skip(self, rel: str, reason: Skip) -> None:
        if reason == "permission-denied":
            self._refused.add(rel)
        if (rel, reason) not in self._skipped:  # each skip is logged once
            self._skipped.add((rel, reason))
            why = skip_reason(reason, self.rules)
            if why:  # a file meant as a note: say why it is not stored
                log.warning("note watcher %s: %s not stored: %s", self.tree.folder, rel, why)
            else:
                log.debug("not a note: %s (%s)", rel, reason)

    def _plan(self) -> Plan:
        """The reconciliation, leaving alone what lies in a file or folder it may not read: those notes
        would be reconciled as deleted (until it can, they are kept as they were)."""
        stored = self.sink.store.sources(self.project, OWNED_PREFIXES, self.tree.scope)
        return reconcile({p: d for p, d in self.docs.items() if not _within(p, self._refused)},
                         {row.ref: row for row in stored if not _within(row.path, self._refused)})

    def _apply(self, plan: Plan) -> SyncReport:
        failed, moved = list(plan.invalid), set()
        for rename in plan.renames:
            try:
                if self.sink.store.rename_ref(self.project, rename.old_ref, rename.new_ref, rename.path):
                    moved.add(rename.new_ref)
            except InputError as exc:  # taken meanwhile (a second watcher on the folder renamed it):
                log.debug("note watcher %s: %s: %s", self.tree.folder, rename.path, exc)  # the write settles it
        written, redactions = self._write(list(plan.writes), failed, moved)
        forgotten = self._forget(list(plan.forgets))
        for problem in failed:
            log.warning("note watcher %s: not stored: %s", self.tree.folder, problem)
        paths = ([r.path for r in plan.renames] + [w["path"] for w in plan.writes]
                 + [row.path for row in plan.forgets])
        report = SyncReport(written, len(moved), forgotten, tuple(failed), dict(redactions),
                            tuple(dict.fromkeys(paths)))
        if report.changed:
            log.info("notes in %s: %d written, %d renamed, %d removed", self.tree.folder,
                     report.written, report.renamed, report.forgotten)
        return report

    def _write(self, items: list[dict[str, Any]], failed: list[str],
               moved: set[str]) -> tuple[int, Counter[str]]:
        """In batches; a refused batch is retried item by item so one bad file blocks nothing.
        An item renamed in place (`moved`) is written only to record its new path in its content
        hash: its text is unchanged, so it counts as renamed, not written."""
        redactions: Counter[str] = Counter()
        for item in items:
            redactions.update(self._doc_redactions(item))
        written = 0
        for batch in batches(items, MAX_BATCH):
            try:
                written += _changed(self.sink.ingest(self.project, list(batch)), moved)
            except InputError:
                for item in batch:
                    try:
                        written += _changed(self.sink.ingest(self.project, [item]), moved)
                    except InputError as exc:
                        failed.append(f"{item['path']}: {exc}")
        return written, redactions

    def _doc_redactions(self, item: Mapping[str, Any]) -> Mapping[str, int]:
        doc = self.docs.get(item["path"])
        return doc.redactions if doc else {}

    def _forget(self, rows: list[SourceRow]) -> int:
        forgotten = 0
        for row in rows:  # one by one: a ref forgotten meanwhile (a client, a second watcher) is no error
            try:
                forgotten += bool(self.sink.forget(self.project, [row.ref]))
            except InputError as exc:
                log.debug("note watcher %s: %s: %s", self.tree.folder, row.path, exc)
        return forgotten


def _within(path: str, places: Iterable[str]) -> bool:
    """Whether `path` is one of `places` or lies in one of them (a folder ends in '/'; '' is the root)."""
    return any(path == p or (p == "" or p.endswith("/")) and path.startswith(p) for p in places)


def _changed(done: Ingested, moved: set[str]) -> int:
    return sum(r.outcome != "unchanged" and r.ref not in moved for r in done.results)


async def watch_notes(sink: Sink, project: str, folder: Path | str, rules: NoteRules = NoteRules(),
                      *, on_sync: Callable[[SyncReport], None] | None = None,
                      task_status: TaskStatus[SyncReport] = anyio.TASK_STATUS_IGNORED
                      ) -> None:
    """Watch `folder` until cancelled. The first (empty) batch of a watch arrives once the OS
    watch is live; the full reconciliation runs then, so no change can fall between scan and watch.
    The OS watch follows the folder it was given: when the folder is removed, moved away or replaced
    (a branch checked out without it, then with it), its notes are reconciled as gone and the folder
    made again is watched anew, as it is after the watch fails (`FileWatch`)."""
    watcher = NoteWatcher(sink, project, folder, rules)
    watch, started = FileWatch(watcher.tree.folder, watcher.wants, "note watcher"), False
    while True:
        here = _identity(watcher.tree.folder)  # events name paths under the folder as given: give the resolved one
        async with watch.events() as watching:
            scanned = False
            async for changes in watching:
                if _identity(watcher.tree.folder) != here:
                    break
                if scanned and not changes:  # a quiet moment: notes left empty are empty now
                    report = await anyio.to_thread.run_sync(watcher.settle)
                else:
                    report = await anyio.to_thread.run_sync(watcher.handle, changes if scanned else None)
                    scanned = True
                if not started:
                    started = True
                    task_status.started(report)
                elif on_sync is not None and report.changed:
                    on_sync(report)
        # the folder went (so do its notes, until it is back) or was replaced, or the watch failed: what
        # it missed is read now (a watch may fail each time it starts: see FileWatch.pause)
        report = await anyio.to_thread.run_sync(watcher.handle)
        if not started:
            started = True
            task_status.started(report)
        elif on_sync is not None and report.changed:
            on_sync(report)
        await watch.pause()
        while _identity(watcher.tree.folder) is None:
            await anyio.sleep(WAKE_MS / 1000)


def _identity(folder: Path) -> tuple[int, int] | None:
    """Which folder is at `folder` now (device and inode), None when none is."""
    try:
        found = folder.stat()
    except OSError:
        return None
    return (found.st_dev, found.st_ino) if stat.S_ISDIR(found.st_mode) else None
