"""What a project note is, and reading one from disk.

A note is a Markdown, reStructuredText or plain-text file (the globs are configurable) under a
watched folder that git would not ignore, outside hidden and build folders, not binary and not
over the size limit. Paths are relative to the project root: the nearest folder above the watched
one that holds `.git`, else the watched folder itself, so `--watch docs` in a repository still
stores `docs/adr/0007-message-broker.md`.
"""

from __future__ import annotations

import errno
import fnmatch
import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Iterator, Literal, Mapping

import pathspec

from agentmemrec.indexing.redact import redact
from agentmemrec.indexing.sources.adr import Adr, parse_adr
from agentmemrec.indexing.sources.fswatch import utf8_name
from agentmemrec.indexing.units import MAX_TEXT_BYTES

log = logging.getLogger(__name__)

DEFAULT_GLOBS = ("*.md", "*.markdown", "*.mdx", "*.rst", "*.txt")
BUILD_DIRS = frozenset({"node_modules", "bower_components", "build", "dist", "target", "_build",
                        "venv", "__pycache__", "site-packages", "vendor", "coverage", "htmlcov"})
SNIFF_BYTES = 8192
Skip = Literal["gitignored", "hidden", "build-folder", "not-a-note", "binary", "too-large", "empty",
               "unreadable", "outside-repository", "link-to-a-note", "link-to-a-skipped-file", "link-loop",
               "not-a-file", "name-not-utf-8", "permission-denied"]
REFUSED = frozenset({errno.EACCES, errno.EPERM})


@dataclass(frozen=True)
class NoteRules:
    """Which files are notes. Globs match file names; `max_bytes` is at most the unit limit."""

    globs: tuple[str, ...] = DEFAULT_GLOBS
    max_bytes: int = MAX_TEXT_BYTES
    skip_dirs: frozenset[str] = BUILD_DIRS

    def is_note_name(self, name: str) -> bool:
        return any(fnmatch.fnmatch(name.lower(), g.lower()) for g in self.globs)

    def folder_skip(self, name: str) -> Skip | None:
        if not utf8_name(name):
            return "name-not-utf-8"
        if name.startswith("."):
            return "hidden"
        return "build-folder" if name in self.skip_dirs else None


@dataclass(frozen=True)
class Tree:
    """A watched folder and the project root its note paths are relative to."""

    root: Path
    folder: Path

    @classmethod
    def of(cls, folder: Path | str) -> "Tree":
        folder = Path(folder).resolve()
        root = next((p for p in (folder, *folder.parents) if (p / ".git").exists()), folder)
        return cls(root, folder)

    @property
    def scope(self) -> str:
        """The folder as a path prefix under the root ('' when it is the root)."""
        rel = self.folder.relative_to(self.root).as_posix()
        return "" if rel == "." else rel + "/"

    def rel(self, path: Path | str) -> str | None:
        """`path` relative to the root, if it lies inside the watched folder."""
        try:
            rel = Path(os.path.abspath(path)).relative_to(self.folder)
        except ValueError:
            return None
        return (PurePosixPath(self.scope) / rel.as_posix()).as_posix() if rel.parts else None


@dataclass(frozen=True)
class Ignores:
    """The .gitignore files seen so far: (folder relative to the root, its patterns)."""

    specs: tuple[tuple[str, pathspec.GitIgnoreSpec], ...] = ()

    def adding(self, base: str, text: str) -> "Ignores":
        spec = pathspec.GitIgnoreSpec.from_lines(text.splitlines())
        return Ignores(self.specs + ((base, spec),))

    def ignored(self, rel: str, is_dir: bool) -> bool:
        """Git's rule: the deepest .gitignore with a matching pattern decides."""
        verdict = False
        for base, spec in sorted(self.specs, key=lambda s: s[0].count("/")):
            if base and not rel.startswith(base):
                continue
            result = spec.check_file(rel[len(base):] + ("/" if is_dir else ""))
            if result.include is not None:
                verdict = result.include
        return verdict


def ignores_above(tree: Tree, rel: str) -> Ignores:
    """The .gitignore files of every folder above `rel` (a file, or a folder ending in '/'),
    from the project root down."""
    if not rel:
        return Ignores()
    parts = rel.rstrip("/").split("/")[:-1]
    ignores = Ignores()
    for depth in range(len(parts) + 1):
        base = "".join(f"{p}/" for p in parts[:depth])
        ignores = _read_ignore(tree.root / base, base, ignores)
    return ignores


def _read_ignore(folder: Path, base: str, ignores: Ignores) -> Ignores:
    try:
        return ignores.adding(base, (folder / ".gitignore").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return ignores


@dataclass(frozen=True)
class Doc:
    """A note file as read: its text (redacted when redaction is on) and, if any, its ADR."""

    path: str
    text: str
    adr: Adr | None = None
    redactions: Mapping[str, int] = field(default_factory=dict, compare=False)


def walk(tree: Tree, rules: NoteRules, under: str | None = None
         ) -> Iterator[tuple[str, Path | Skip]]:
    """(path, file) for every note file in the watched folder (or its sub-folder `under`, a
    path ending in '/'), and (path, reason) for what is skipped. Ignored, hidden and build
    folders are not entered."""
    under = tree.scope if under is None else under
    ignores = ignores_above(tree, under)
    skipped = _folder_skip(under, rules, ignores) if under != tree.scope else None
    if skipped:
        yield under, skipped
        return
    start, refused = tree.root / under, []
    for dirpath, dirnames, filenames in os.walk(start, onerror=refused.append):
        yield from _refused_folders(tree, refused)
        here = Path(dirpath)
        base = here.relative_to(tree.root).as_posix()
        base = "" if base == "." else base + "/"
        if ".gitignore" in filenames:
            ignores = _read_ignore(here, base, ignores)
        kept = []
        for name in sorted(dirnames):
            reason = rules.folder_skip(name) or (
                "gitignored" if ignores.ignored(base + name, True) else None)
            if reason:
                yield base + name + "/", reason
            else:
                kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            yield base + name, classify(base + name, rules, ignores) or here / name
    yield from _refused_folders(tree, refused)


def _refused_folders(tree: Tree, errors: list[OSError]) -> Iterator[tuple[str, Skip]]:
    """The folders os.walk could not list because it may not (other errors: the folder is gone)."""
    for error in errors:
        if error.errno in REFUSED and error.filename is not None:
            rel = Path(os.fsdecode(error.filename)).relative_to(tree.root).as_posix()
            yield ("" if rel == "." else rel + "/"), "permission-denied"
    errors.clear()


def _folder_skip(rel: str, rules: NoteRules, ignores: Ignores) -> Skip | None:
    for name in rel.rstrip("/").split("/"):
        reason = rules.folder_skip(name)
        if reason:
            return reason
    return "gitignored" if ignores.ignored(rel.rstrip("/"), True) else None


def classify(rel: str, rules: NoteRules, ignores: Ignores) -> Skip | None:
    """Why a file is not a note, from its path alone; None when it may be one."""
    parts = rel.split("/")
    for folder in parts[:-1]:
        reason = rules.folder_skip(folder)
        if reason:
            return reason
    if not utf8_name(parts[-1]):
        return "name-not-utf-8"
    if parts[-1].startswith("."):
        return "hidden"
    if not rules.is_note_name(parts[-1]):
        return "not-a-note"
    return "gitignored" if ignores.ignored(rel, False) else None


def links_to_note(tree: Tree, rules: NoteRules, file: Path) -> bool:
    """Whether `file` is a symbolic link to a note of the watched folder. That note is stored under
    its own path; a copy under the link's would go stale, since an edit of the target names only
    the target in the file-system events."""
    if not file.is_symlink():
        return False
    real = _resolve(file)
    target = tree.rel(real) if isinstance(real, Path) else None
    return target is not None and classify(target, rules, ignores_above(tree, target)) is None


def _resolve(file: Path) -> Path | Skip:
    """The file a path leads to, or why there is none."""
    try:
        return file.resolve(strict=True)
    except RuntimeError:  # Python before 3.13 reports a loop so
        return "link-loop"
    except OSError as exc:
        return "link-loop" if exc.errno == errno.ELOOP else "unreadable"


def link_target_skip(tree: Tree, rules: NoteRules, real: Path) -> Skip | None:
    """Why the file a link leads to may not be read: outside the repository, or a file the watcher
    would skip if it found it directly (hidden, in a hidden, build or git-ignored folder, or
    git-ignored), so a committed `docs/env.md -> ../.env` stores nothing. Its name may be any."""
    try:
        rel = real.relative_to(tree.root).as_posix()
    except ValueError:
        return "outside-repository"
    ignores = ignores_above(tree, rel)
    folders = rel.split("/")[:-1]
    if any(ignores.ignored("/".join(folders[:depth]), True) for depth in range(1, len(folders) + 1)):
        return "link-to-a-skipped-file"
    return None if classify(rel, rules, ignores) in (None, "not-a-note") else "link-to-a-skipped-file"


def skip_reason(reason: Skip, rules: NoteRules) -> str | None:
    """Why a file that looks like a note is not stored, said once as a warning; None for the
    skips that are by design (ignored, hidden, not a note), which are logged at debug level."""
    return {"too-large": f"over the {rules.max_bytes / 1024:g} KiB a note may hold",
            "binary": "not UTF-8 text (or it holds a NUL byte)",
            "unreadable": "it cannot be read",
            "outside-repository": "it links to a file outside the repository",
            "link-to-a-skipped-file": "it links to a hidden, git-ignored or build-folder file",
            "link-loop": "it is a symbolic link loop",
            "not-a-file": "not a regular file (a FIFO, socket or device)",
            "name-not-utf-8": "its name is not UTF-8, which the file-system watch cannot name: rename it",
            "permission-denied": "it cannot be read (permission denied): the notes stored from it are kept until it "
                                 "can be; give this user read access to it, or add it to .gitignore to drop them",
            }.get(reason)


def read_doc(rel: str, file: Path, rules: NoteRules, redacting: bool, tree: Tree) -> Doc | Skip:
    """The note at `file`, or why it is skipped (binary, too large, empty, unreadable, not a regular
    file, or a link leading out of the repository or to a file the watcher skips: a cloned
    repository must not pull any file its user can read into an agent's context)."""
    real = _resolve(file)
    if isinstance(real, str):
        return real
    if real != Path(os.path.abspath(file)):
        skipped = link_target_skip(tree, rules, real)
        if skipped:
            return skipped
    try:  # not blocking: a FIFO would wait for a writer forever
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))  # read what was checked
        with os.fdopen(fd, "rb") as stream:
            found = os.fstat(stream.fileno())
            if not stat.S_ISREG(found.st_mode):
                return "not-a-file"
            if found.st_size > rules.max_bytes:
                return "too-large"
            data = stream.read()
    except OSError as exc:
        if exc.errno in REFUSED:
            return "permission-denied"
        return "not-a-file" if exc.errno == errno.ENXIO else "unreadable"  # ENXIO: a socket
    if b"\x00" in data[:SNIFF_BYTES]:
        return "binary"
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return "binary"
    if not text.strip():
        return "empty"
    found = redact(text) if redacting else None
    text = found.text if found else text
    return Doc(rel, text, parse_adr(rel, text), found.counts if found else {})
