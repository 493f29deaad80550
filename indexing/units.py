"""Stage 1: write-time units. What a client sends (`Item`), what the store keeps (`Unit`).

Three kinds of unit, each in exactly one project: conversation turns, decision records and file
notes. Validation lives here so every write path (MCP tool, CLI import, evaluation) applies the
same rules; the messages list the valid values so a caller can correct itself.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal, get_args

from agentmemrec.indexing.errors import InputError
from agentmemrec.indexing.tokens import count_tokens, encoding

Kind = Literal["turn", "decision", "note"]
Role = Literal["user", "assistant", "system", "tool"]
Status = Literal["proposed", "accepted", "rejected", "superseded"]

KINDS: tuple[str, ...] = get_args(Kind)
ROLES: tuple[str, ...] = get_args(Role)
STATUSES: tuple[str, ...] = get_args(Status)

MAX_TEXT_BYTES = 128 * 1024
MAX_FIELD_CHARS = 512
MAX_BATCH = 1000
NOTE_CHUNK_TOKENS = 320
# A turn longer than this (a pasted log, a long answer) is stored as parts of at most TURN_PART_TOKENS,
# so each part can enter a slate: whole, it could outgrow the budget and never be recalled.
TURN_SPLIT_TOKENS, TURN_PART_TOKENS = 1024, 512
PROJECT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Single-line fields (ref, session, speaker, title, path) are rendered inside a slate's item
# header, so they may hold no line break of any kind and no control character (tab aside).
LINE_BREAK_OR_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
# ... nor a character that reorders the text around it (bidi embeddings, overrides, isolates) or is
# invisible with no use in a name (zero-width space, word joiner, BOM): `adr-1` and `adr\u200b-1` would
# look alike, and an override would show a header in another order than it is read. Joiners
# (U+200C, U+200D) and direction marks (U+200E, U+200F) write Persian or Hindi names: kept.
INVISIBLE = re.compile(r"[\u200b\u2060-\u2064\ufeff\u202a-\u202e\u2066-\u2069]")
UNIT_ID = re.compile(r"#[0-9]{1,18}")  # how an id is written ('#42'): no ref may look like one
ITEM_FIELDS = ("kind", "text", "ref", "session", "role", "speaker", "at", "title", "status",
               "supersedes", "path")
# a stored unit's free-text fields (a note's heading trail comes from its text): what redaction
# may rewrite in place (`Store.rewrite`)
TEXT_FIELDS = ("text", "title", "speaker", "session", "heading")
TRAIL = " > "  # between the headings of a note chunk's heading trail (`Deploys > Rollback`)


@dataclass(frozen=True)
class Item:
    """One validated write request. `supersedes` is still the caller's ref or id text."""

    kind: Kind
    text: str
    ref: str | None = None
    session: str | None = None
    role: Role | None = None
    speaker: str | None = None
    at: datetime | None = None
    title: str | None = None
    status: Status | None = None
    supersedes: str | None = None
    path: str | None = None


@dataclass(frozen=True)
class Chunk:
    """A piece of an item as it will be stored: notes split into several, other kinds are one."""

    index: int
    text: str
    heading: str | None
    tokens: int


@dataclass(frozen=True)
class Unit:
    """A stored unit, as read back from DuckDB."""

    id: int
    project: str
    kind: Kind
    text: str
    tokens: int
    at: datetime
    seq: int
    ref: str | None = None
    chunk: int = 0
    session: str | None = None
    role: str | None = None
    speaker: str | None = None
    title: str | None = None
    status: str | None = None
    supersedes: int | None = None
    superseded_by: int | None = None
    path: str | None = None
    heading: str | None = None
    content_hash: str = ""

    def index_text(self) -> str:
        """The text the lexical and dense channels see: content plus the fields a query names."""
        parts = [self.speaker or "", self.title or "", self.path or "", self.heading or "", self.text]
        return "\n".join(p for p in parts if p)


def check_project(name: str) -> str:
    if not isinstance(name, str) or not PROJECT_RE.match(name):
        raise InputError(
            f"invalid project name {name!r}: use 1-64 characters from letters, digits, '.', '_' "
            "and '-', starting with a letter or digit"
        )
    return name


def check_utf8(value: str, what: str) -> str:
    """Text that can be stored: valid Unicode (no lone surrogate halves) and no NUL."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"{what} is not valid Unicode (it holds a lone surrogate); "
                         "send UTF-8 text") from None
    if "\x00" in value:
        raise InputError(f"{what} contains a NUL character; remove it")
    return value


def check_names(values: Any, what: str) -> list[str]:
    """A non-empty list of refs or ids, each a non-empty single line of at most MAX_FIELD_CHARS."""
    if not isinstance(values, (list, tuple)) or not values or not all(
            isinstance(v, str) and v.strip() for v in values):
        raise InputError(f"{what} must be a non-empty list of refs or ids (e.g. 'adr-7' or '#42')")
    for number, value in enumerate(values, 1):
        if len(value.strip()) > MAX_FIELD_CHARS:  # no stored ref is longer; the message never echoes it
            raise InputError(f"{what} entry {number} has more than {MAX_FIELD_CHARS} characters, longer than any ref")
        _one_line(check_utf8(value, what), f"{value!r}", what)
    return [v.strip() for v in values]


def parse_time(value: Any, what: str = "at") -> datetime | None:
    """ISO 8601 text or a datetime to naive UTC; None stays None."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InputError(f"{what}={value!r} is not an ISO 8601 timestamp; "
                             "use e.g. '2026-05-02T14:30:00Z'") from None
    else:
        raise InputError(f"{what} must be an ISO 8601 string, got {type(value).__name__}")
    if dt.tzinfo is not None:
        try:
            dt = dt.astimezone(timezone.utc).replace(tzinfo=None)
        except OverflowError:  # e.g. 9999-12-31T23:00-05:00 is past the last representable day
            raise InputError(f"{what}={value!r} is out of range; use a time between the "
                             "years 1 and 9999 (UTC)") from None
    return dt


def _choice(value: Any, valid: tuple[str, ...], what: str, position: str) -> Any:
    if value is None:
        return None
    if value not in valid:
        raise InputError(f"{position}: unknown {what} {value!r}; use one of: {', '.join(valid)}")
    return value


def _one_line(value: str, what: str, position: str) -> str:
    if LINE_BREAK_OR_CONTROL.search(value.strip()):
        raise InputError(f"{position}: {what} must be a single line without line breaks or "
                         "control characters")
    hidden = INVISIBLE.search(value)
    if hidden:
        raise InputError(f"{position}: {what} holds an invisible or text-direction character "
                         f"(U+{ord(hidden[0]):04X}); remove it")
    return value


def _short(value: Any, what: str, position: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputError(f"{position}: {what} must be a string, got {type(value).__name__}")
    value = check_utf8(value, f"{position}: {what}").strip()
    if len(value) > MAX_FIELD_CHARS:
        raise InputError(f"{position}: {what} is longer than {MAX_FIELD_CHARS} characters")
    return _one_line(value, what, position) or None


def id_hint(name: str) -> str:
    """What to add when a name found nothing and is a bare number: ids are written '#42'."""
    if not re.fullmatch(r"[0-9]{1,18}", name):
        return ""
    return f" (the unit with id {name} is written '#{name}', quoted in a shell)"


def _ref(value: Any, position: str) -> str | None:
    """A ref names an item for later writes and for forget: one of spaces alone names nothing a
    later call could repeat, and one written like an id would be read as that id."""
    if isinstance(value, str) and value and not value.strip():
        raise InputError(f"{position}: ref is blank; leave it out or give the item a name")
    ref = _short(value, "ref", position)
    if ref and UNIT_ID.fullmatch(ref):
        raise InputError(f"{position}: ref {ref!r} is written like an id ('#42' names the unit with "
                         "id 42); use another ref, e.g. without the '#'")
    return ref


def _text(value: Any, position: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"{position}: text must be a string")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InputError(f"{position}: text is not valid Unicode (lone surrogate); "
                         "send UTF-8 text") from None
    if size > MAX_TEXT_BYTES:
        raise InputError(f"{position}: text is {size} bytes, over the {MAX_TEXT_BYTES}-byte limit; "
                         "split it into several items")
    value = value.replace("\x00", "")  # NUL carries nothing a reader could use
    if not value.strip():
        raise InputError(f"{position}: text is empty; send the content to remember")
    return value


def _path(value: Any, position: str) -> str | None:
    path = _short(value, "path", position)
    if path is None:
        return None
    parts = path.replace("\\", "/").split("/")
    if path.startswith(("/", "~")) or ".." in parts or re.match(r"^[A-Za-z]:", path):
        raise InputError(f"{position}: path {path!r} must be relative to the project root, "
                         "without '..'")
    return "/".join(p for p in parts if p not in ("", "."))


def validate_item(raw: dict[str, Any], position: str = "item") -> Item:
    """Check one raw item and return it typed; raise InputError with a fix-it message."""
    if not isinstance(raw, dict):
        raise InputError(f"{position}: each item must be an object with at least 'kind' and 'text'")
    unknown = sorted(set(raw) - set(ITEM_FIELDS))
    if unknown:
        raise InputError(f"{position}: unknown field(s) {unknown}; valid fields: {', '.join(ITEM_FIELDS)}")
    kind = _choice(raw.get("kind"), KINDS, "kind", position)
    if kind is None:
        raise InputError(f"{position}: kind is required; use one of: {', '.join(KINDS)}")
    item = Item(
        kind=kind,
        text=_text(raw.get("text"), position),
        ref=_ref(raw.get("ref"), position),
        session=_short(raw.get("session"), "session", position),
        role=_choice(raw.get("role"), ROLES, "role", position),
        speaker=_short(raw.get("speaker"), "speaker", position),
        at=parse_time(raw.get("at"), f"{position}: at"),
        title=_short(raw.get("title"), "title", position),
        status=_choice(raw.get("status"), STATUSES, "status", position),
        supersedes=_short(raw.get("supersedes"), "supersedes", position),
        path=_path(raw.get("path"), position),
    )
    return _check_kind_fields(item, position)


def _check_kind_fields(item: Item, position: str) -> Item:
    if item.kind != "decision" and (item.status or item.supersedes):
        raise InputError(f"{position}: status and supersedes apply to decisions only")
    if item.kind == "note" and not item.path:
        raise InputError(f"{position}: a note needs the file path it describes ('path')")
    if item.kind == "note" and item.ref is None:  # a note is keyed by its path unless given a ref
        return Item(**{**item.__dict__, "ref": item.path})
    if item.kind == "turn" and item.role is None:
        return Item(**{**item.__dict__, "role": "user"})
    if item.kind == "decision" and item.status is None:
        return Item(**{**item.__dict__, "status": "accepted"})
    return item


def validate_batch(raw_items: Any) -> list[Item]:
    if not isinstance(raw_items, list) or not raw_items:
        raise InputError("items must be a non-empty list of objects")
    if len(raw_items) > MAX_BATCH:
        raise InputError(f"a batch holds at most {MAX_BATCH} items; got {len(raw_items)}, "
                         "send them in several calls")
    items = [validate_item(raw, f"item {i}") for i, raw in enumerate(raw_items, 1)]
    where: dict[str, list[int]] = {}
    for i, it in enumerate(items, 1):
        if it.ref:
            where.setdefault(it.ref, []).append(i)
    dupes = [f"items {', '.join(map(str, at))}: ref {ref!r}" for ref, at in where.items() if len(at) > 1]
    if dupes:
        raise InputError(f"{'; '.join(dupes)} appears more than once in this batch; "
                         "send each ref once (a later call with the same ref updates it)")
    return items


def content_hash(item: Item) -> str:
    """Identity of an item's content: the same content written twice is stored once."""
    parts = [item.kind, item.text, item.session or "", item.role or "", item.speaker or "",
             item.title or "", item.status or "", item.supersedes or "", item.path or "",
             item.at.isoformat() if item.at else ""]
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()


def chunk_item(item: Item) -> list[Chunk]:
    """Notes split by heading into chunks of a few hundred tokens; a turn over TURN_SPLIT_TOKENS
    into parts by paragraph; any other item is one chunk."""
    if item.kind != "note":
        tokens = count_tokens(item.text)
        if item.kind != "turn" or tokens <= TURN_SPLIT_TOKENS:
            return [Chunk(0, item.text, None, tokens)]
        pieces: list[tuple[str | None, str]] = [(None, part) for part in _pack(item.text.strip(), TURN_PART_TOKENS)]
    else:
        pieces = [(heading, part) for heading, body in _sections(item.text) for part in _pack(body, NOTE_CHUNK_TOKENS)]
        if not pieces:  # headings and nothing under them: the headings are the content
            pieces = [(None, part) for part in _pack(item.text.strip(), NOTE_CHUNK_TOKENS)]
    return [Chunk(i, text, heading, count_tokens(text)) for i, (heading, text) in enumerate(pieces)]


def _sections(text: str) -> list[tuple[str | None, str]]:
    """Split Markdown at headings; each section keeps its heading trail (H1 > H2 > ...)."""
    trail: list[tuple[int, str]] = []
    sections: list[tuple[str | None, list[str]]] = [(None, [])]
    in_fence = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        match = None if in_fence else re.match(r"^(#{1,6})\s+(.*\S)\s*$", line)
        if match:
            level = len(match.group(1))
            trail = [t for t in trail if t[0] < level] + [(level, match.group(2).strip("# "))]
            sections.append((TRAIL.join(t[1] for t in trail), []))  # the trail replaces the line
        else:
            sections[-1][1].append(line)
    return [(h, "\n".join(lines).strip()) for h, lines in sections if "\n".join(lines).strip()]


def _pack(body: str, limit: int) -> list[str]:
    """Greedy packing of paragraphs into chunks of at most `limit` tokens."""
    out: list[str] = []
    current: list[str] = []
    size = 0
    for para in _paragraphs(body, limit):
        n = count_tokens(para)
        if current and size + n > limit:
            out.append("\n\n".join(current))
            current, size = [], 0
        current.append(para)
        size += n + 1
    if current:
        out.append("\n\n".join(current))
    return out


def _paragraphs(body: str, limit: int) -> list[str]:
    paras = [p.strip() for p in re.split(r"\n\s*\n", body) if p.strip()]
    out: list[str] = []
    for para in paras:
        out.extend([para] if count_tokens(para) <= limit else _cut(para, limit))
    return [p for p in out if p]


def _cut(text: str, limit: int, seps: tuple[str, ...] = ("\n", " ")) -> list[str]:
    """An overlong paragraph (a pasted log, a code block) in pieces of at most `limit` tokens:
    whole lines packed together; a line longer than that at spaces; a run without any (a long
    hash or URL) at token boundaries, so no line or word is cut in two that need not be."""
    if not seps:
        ids = encoding().encode(text, disallowed_special=())
        return [encoding().decode(ids[i:i + limit]).strip() for i in range(0, len(ids), limit)]
    sep, out, current, size = seps[0], [], [], 0
    parts = text.split(sep)
    for part in parts:
        n = count_tokens(sep + part)  # with its separator, which may merge with the part's start
        if n > limit:  # a piece that is too long alone: cut at the next separator
            out.extend(filter(None, [sep.join(current).strip()] + _cut(part, limit, seps[1:])))
            current, size = [], 0
            continue
        if current and size + n > limit:
            out.append(sep.join(current).strip())
            current, size = [], 0
        current.append(part)
        size += n
    out.append(sep.join(current).strip())
    # the pieces' counts add up to about their join's; where merges across a separator make it
    # more, the token cut keeps the limit
    return [q for piece in out for q in ([piece] if count_tokens(piece) <= limit else _cut(piece, limit, ()))]
