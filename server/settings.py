"""Configuration, read once at the composition root into one frozen object passed down."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Mapping

from agentmemrec.indexing.errors import InputError
from agentmemrec.indexing.segments import INDEX_MEMORY
from agentmemrec.indexing.sources.notes import DEFAULT_GLOBS
from agentmemrec.indexing.sources.transcripts import ProjectMap, git_root
from agentmemrec.indexing.store.backends import check_store_url
from agentmemrec.indexing.units import check_project
from agentmemrec.ranking.candidates import DEFAULT_POOL
from agentmemrec.server.owner_socket import STORE_ENV, default_home

VERSION = version("agentmemrec")
INFERENCE_ENV = "AGENTMEMREC_INFERENCE"  # inference server URLs: models run there, not here
INFERENCE_TOKEN_ENV = "AGENTMEMREC_INFERENCE_TOKEN"  # the bearer token `models serve` wants, sent to it
COMPILE_ENV = "AGENTMEMREC_COMPILE_RANKER"  # 0: the ranker's boosters are never compiled (LightGBM predicts)
MAX_REQUEST_BYTES = 16 * 1024 * 1024  # an HTTP request body; a full batch of large items is split

log = logging.getLogger("agentmemrec")


@dataclass(frozen=True)
class Access:
    """Who is calling and which projects it may use: the local server's `--project/--allow`, or
    the principal an HTTP bearer token names."""

    principal: str
    default: str
    allowed: frozenset[str]
    refusal: str  # how the caller gets more access

    def resolve(self, project: str | None) -> str:
        """The project a call works on (none or empty: the default); a name that is not a project
        name gets the naming rules, one outside the allowed set is refused and logged."""
        name = check_project(project) if project else self.default
        if name not in self.allowed:
            log.warning("denied: %s asked for project %r; allowed: %s", self.principal, name,
                        ",".join(sorted(self.allowed)))
            raise InputError(f"project {name!r} {self.refusal}; allowed: "
                             f"{', '.join(sorted(self.allowed))}")
        return name


@dataclass(frozen=True)
class Settings:
    home: Path
    store: str | None = None  # a PostgreSQL URL; None: the DuckDB file in the home
    inference: str | None = None  # inference server URLs (comma-separated); None: the home's models
    inference_token: str | None = field(default=None, repr=False)  # sent to them as a bearer token
    project: str = "default"
    allowed: frozenset[str] = frozenset({"default"})
    pool_size: int = DEFAULT_POOL
    device: str = "auto"
    rerank_limit: int | None = None  # candidates the cross-encoder scores (None: by device)
    index_memory_mib: int = INDEX_MEMORY >> 20  # each derived index's snapshots, all projects
    ranker_model: Path | None = None  # default: the model shipped in the package
    redact: bool = True  # secrets become [REDACTED:<kind>] before anything is stored
    watch: tuple[Path, ...] = ()  # folders whose notes and ADRs follow into the default project
    note_globs: tuple[str, ...] = DEFAULT_GLOBS
    capture_claude_code: bool = False  # store Claude Code sessions as they are written
    claude_dir: Path = Path("~/.claude/projects")
    project_map: Path | None = None  # cwd prefix -> project overrides for transcripts
    include_sidechains: bool = False
    http: bool = False  # serving HTTP: every call needs a bearer token, which decides its access
    max_request_bytes: int = MAX_REQUEST_BYTES
    # predict with the boosters as machine code once compiled (ranking/compiled.py); `load` turns
    # it on unless AGENTMEMREC_COMPILE_RANKER=0
    compile_ranker: bool = False

    @classmethod
    def load(cls, project: str | None = None, allow: str | list[str] | None = None,
             env: Mapping[str, str] = os.environ, **extra: object) -> "Settings":
        """The default project is always allowed; `allow` adds more (comma-separated or a list).
        The store is `store` (from --store), else `AGENTMEMREC_STORE`, else the home's DuckDB file."""
        project = check_project(project or env.get("AGENTMEMREC_PROJECT") or repository_project(Path.cwd())
                                or "default")
        names = allow.split(",") if isinstance(allow, str) else list(allow or [])
        allowed = frozenset({project, *(check_project(n.strip()) for n in names if n.strip())})
        store = extra.pop("store", None) or env.get(STORE_ENV) or None
        inference = extra.pop("inference", None) or env.get(INFERENCE_ENV) or None
        extra.setdefault("compile_ranker", env.get(COMPILE_ENV, "1") != "0")
        extra.setdefault("inference_token", env.get(INFERENCE_TOKEN_ENV) or None)
        return cls(home=default_home(env), store=check_store_url(store) if store else None,  # type: ignore[arg-type]
                   inference=inference, project=project, allowed=allowed, **extra)

    @property
    def access(self) -> Access:
        return Access("the local client", self.project, self.allowed,
                      "is not served by this server (start the server with --allow to serve more)")

    def resolve_project(self, project: str | None) -> str:
        return self.access.resolve(project)


def repository_project(cwd: Path) -> str | None:
    """The project of the git repository around `cwd`: the name setup, the hook and captured
    sessions give it, so a command run in a repository works on what its client reads. None
    outside a repository."""
    try:
        root = git_root(str(cwd.resolve()))
    except OSError:  # a cwd that was removed
        return None
    return ProjectMap().project_for(str(root)) if (root / ".git").exists() else None


def watch_folders(paths: list[str] | list[Path] | None) -> tuple[Path, ...]:
    """The folders to watch, resolved; each must exist."""
    folders = tuple(Path(p).expanduser().resolve() for p in paths or ())
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        raise InputError(f"cannot watch {', '.join(missing)}: not a directory")
    return folders
