"""Claude Code transcripts as turns: a pure converter from one JSONL line to one remember item.

Claude Code writes a session to `~/.claude/projects/<cwd with / as ->/<session id>.jsonl`, one
JSON object a line. User and assistant lines become `turn` units keyed by the line's uuid (so a
re-import or a restart never duplicates), with the session id and the line's timestamp. Tool
calls are kept short (tool name and its file, command or pattern); a tool's output is skipped
unless it is an error, which keeps its first 200 characters. Thinking, progress and bookkeeping
lines, compaction preambles and (unless asked) subagent sidechains are skipped, each counted.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Mapping

from agentmemrec.indexing.errors import InputError
from agentmemrec.indexing.redact import redact
from agentmemrec.indexing.units import PROJECT_RE, validate_item

Skip = Literal["malformed", "not-a-message", "sidechain", "compaction", "meta", "thinking",
               "tool-output", "empty", "no-project", "other-project", "refused"]
COMPACTION_PREFIX = "This session is being continued from a previous conversation"
META_PREFIXES = ("<command-name>", "<command-message>", "<local-command-stdout>",
                 "<local-command-stderr>", "Caveat: The messages below were generated")
TOOL_FIELDS = ("file_path", "notebook_path", "path", "command", "pattern", "url", "query",
               "description", "prompt")


@dataclass(frozen=True)
class TranscriptOptions:
    include_sidechains: bool = False
    max_text_bytes: int = 16 * 1024  # a longer turn (a pasted log) is cut here
    tool_chars: int = 200  # of a tool call's argument, or of a failed tool's output
    # redact a tool's argument and output before they are flattened to one line and clipped: a
    # token cut short, or a `.env` line run into the next, would no longer look like a secret
    redact: bool = True


@dataclass(frozen=True)
class Turn:
    """A converted line: the cwd its project is read from, and the remember item."""

    cwd: str | None
    item: dict[str, Any]


def convert_line(line: str, options: TranscriptOptions = TranscriptOptions()) -> Turn | Skip:
    """One transcript line to a turn, or the reason it is skipped. Never raises."""
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):  # nested deeper than the parser goes: malformed too
        return "malformed"
    if not isinstance(obj, dict):
        return "malformed"
    if obj.get("type") == "summary" or obj.get("isCompactSummary"):
        return "compaction"
    message = obj.get("message")
    if obj.get("type") not in ("user", "assistant") or not isinstance(message, dict):
        return "not-a-message"
    if obj.get("isSidechain") and not options.include_sidechains:
        return "sidechain"
    if obj.get("isMeta"):
        return "meta"
    return _turn(obj, message, options)


def _turn(obj: Mapping[str, Any], message: Mapping[str, Any], options: TranscriptOptions
          ) -> Turn | Skip:
    parts, blocks = _render(message.get("content"), options)
    text = "\n".join(p for p in parts if p.strip()).strip()
    only_results = bool(blocks) and set(blocks) == {"tool_result"}
    if not text:
        if only_results:
            return "tool-output"
        return "thinking" if blocks and set(blocks) <= {"thinking", "redacted_thinking"} else "empty"
    if text.startswith(COMPACTION_PREFIX):
        return "compaction"
    if text.startswith(META_PREFIXES):
        return "meta"
    role = "tool" if only_results else ("assistant" if message.get("role") == "assistant" else "user")
    raw = {"kind": "turn", "text": _cap(text, options.max_text_bytes), "role": role,
           "ref": obj.get("uuid"), "session": obj.get("sessionId"), "at": obj.get("timestamp")}
    raw = {k: v for k, v in raw.items() if v is not None}
    try:
        validate_item(raw)
    except InputError:
        return "malformed"
    cwd = obj.get("cwd")
    return Turn(cwd if isinstance(cwd, str) else None, raw)


def _render(content: Any, options: TranscriptOptions) -> tuple[list[str], list[str]]:
    """(text parts, the block types seen). Thinking and images are dropped, tool results
    unless they are errors."""
    if isinstance(content, str):
        return [content], ["text"]
    if not isinstance(content, list):
        return [], []
    parts, kinds = [], []
    for block in content:
        kind = str(block.get("type")) if isinstance(block, dict) else "unknown"
        kinds.append(kind)
        if kind == "text":
            parts.append(_text_of(block))
        elif kind == "tool_use":
            parts.append(tool_call(block, options.tool_chars, options.redact))
        elif kind == "tool_result" and block.get("is_error"):
            parts.append(f"[tool result (error): {_flat(block.get('content'), options.tool_chars, options.redact)}]")
    return parts, kinds


def tool_call(block: Mapping[str, Any], limit: int = 200, redacted: bool = True) -> str:
    """`[tool Bash: pytest -q]`: the tool's name and its most telling argument, never its output."""
    name = str(block.get("name") or "tool")
    args = block.get("input") if isinstance(block.get("input"), dict) else {}
    arg = next((args[k] for k in TOOL_FIELDS if isinstance(args.get(k), str) and args[k].strip()), "")
    arg = _one_line(arg, limit, redacted)
    return f"[tool {name}: {arg}]" if arg else f"[tool {name}]"


def _text_of(block: Mapping[str, Any]) -> str:
    """A text block's text; one without text (`"text": null`) adds nothing, not the word "None"."""
    text = block.get("text")
    return text if isinstance(text, str) else ""


def _flat(content: Any, limit: int, redacted: bool = True) -> str:
    if isinstance(content, list):
        content = " ".join(_text_of(b) for b in content if isinstance(b, dict))
    return _one_line(str(content or ""), limit, redacted)


REDACT_MARGIN = 4096  # characters past the cut that are redacted too: a secret across it is whole


def _one_line(text: str, limit: int, redacted: bool) -> str:
    """`text` redacted, flattened to one line and clipped to `limit` characters. Only a window is
    redacted (a 4.6 MB error took 10 s in full, to keep 200 characters): what can reach the cut
    plus a margin, widened while redaction shrinks it so that the margin stays past the cut (a
    long key replaced by its marker pulls what follows forward)."""
    if not redacted:
        return _clip(" ".join(text.split()), limit)
    want = limit + REDACT_MARGIN
    while True:
        end = _offset_of(text, want)
        line = " ".join(redact(text[:end]).text.split())
        if end == len(text) or len(line) >= limit + REDACT_MARGIN // 2:
            return _clip(line, limit)
        want *= 4


def _offset_of(text: str, chars: int) -> int:
    """Where in `text` its one-line form (words joined by a space) reaches `chars` characters."""
    count = 0
    for word in re.finditer(r"\S+", text):
        count += len(word.group()) + 1
        if count >= chars:
            return word.end()
    return len(text)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rstrip() + "…"


def _cap(text: str, max_bytes: int) -> str:
    data = text.encode("utf-8", errors="replace")
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes].decode("utf-8", errors="ignore").rstrip() + " […truncated]"


@dataclass(frozen=True)
class ProjectMap:
    """Which project a session belongs to, by its cwd: the longest matching prefix in the
    mapping file, else the name of the git root above the cwd (the cwd's own name when there is
    no repository on this machine). A prefix mapped to "" or null is never imported."""

    prefixes: tuple[tuple[str, str | None], ...] = ()

    @classmethod
    def load(cls, path: Path | None) -> "ProjectMap":
        """A JSON or TOML file: `{"/home/me/src/payments": "payments-api", ...}`."""
        if path is None:
            return cls()
        try:
            text = Path(path).read_text(encoding="utf-8")
            raw = tomllib.loads(text) if Path(path).suffix == ".toml" else json.loads(text)
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read the project map {path}: {exc}") from exc
        raw = raw.get("projects", raw) if isinstance(raw, dict) else raw
        if not isinstance(raw, dict) or not all(isinstance(v, (str, type(None))) for v in raw.values()):
            raise InputError(f"{path}: the project map must map cwd prefixes to project names")
        prefixes = [(str(Path(k).expanduser()).rstrip("/"), v or None) for k, v in raw.items()]
        return cls(tuple(sorted(prefixes, key=lambda p: -len(p[0]))))

    def project_for(self, cwd: str | None) -> str | None:
        if not cwd:
            return None
        mapped = self.prefix_for(cwd)
        return mapped[1] if mapped is not None else _project_name(main_worktree(git_root(cwd)).name)

    def prefix_for(self, cwd: str) -> tuple[str, str | None] | None:
        """The longest mapped prefix at or above `cwd`, with its project; None when none is."""
        return next(((prefix, project) for prefix, project in self.prefixes
                     if cwd == prefix or cwd.startswith(prefix + "/")), None)


@lru_cache(maxsize=1024)
def git_root(cwd: str) -> Path:
    """The nearest folder at or above `cwd` holding `.git`, else `cwd` itself."""
    path = Path(cwd)
    return next((p for p in (path, *path.parents) if (p / ".git").exists()), path)


def main_worktree(root: Path) -> Path:
    """The repository a linked worktree (`git worktree add`) belongs to: its `.git` is a file
    naming a folder under the main repository's `.git/worktrees/`, whose `commondir` leads back.
    So a worktree shares its repository's project; any other root (a submodule too) is itself."""
    try:
        line = (root / ".git").read_text(encoding="utf-8").strip() if (root / ".git").is_file() else ""
        gitdir = (root / line.removeprefix("gitdir:").strip()).resolve() if line.startswith("gitdir:") else None
        common = (gitdir / (gitdir / "commondir").read_text(encoding="utf-8").strip()).resolve() if gitdir else None
    except (OSError, ValueError):
        return root
    if common is None or not common.is_dir():
        return root
    return common.parent if common.name == ".git" else common.with_name(common.name.removesuffix(".git"))


def _project_name(name: str) -> str | None:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("._-")[:64]
    return name if PROJECT_RE.match(name) else None
