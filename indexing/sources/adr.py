"""Architecture decision records as decisions: detection, status, title, date and supersession.

Pure functions over (path, text). An ADR is a file under an ADR folder (`adr/`, `docs/adr/`,
`doc/adr/`, `docs/decisions/`, ...) or any note whose front matter `status:` or `Status:` line
names an ADR status. Its ref is `adr:NNNN` from the number in its file name (`0007-kafka.md`,
`ADR-7.md`), else `adr:<path>`, so a renamed ADR keeps its ref and links can name it by number.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Mapping

from agentmemrec.indexing.errors import InputError
from agentmemrec.indexing.units import Status, parse_time

# ADR statuses (Nygard, MADR, adr-tools and common variants) onto the store's four.
# Deprecated: no longer in force, without a named successor; shown as superseded.
STATUS_WORDS: dict[str, Status] = {
    "proposed": "proposed", "draft": "proposed", "open": "proposed", "pending": "proposed",
    "accepted": "accepted", "approved": "accepted", "adopted": "accepted", "decided": "accepted",
    "rejected": "rejected", "declined": "rejected", "withdrawn": "rejected",
    "superseded": "superseded", "deprecated": "superseded", "obsolete": "superseded",
    "replaced": "superseded", "retired": "superseded",
}
NOT_ADRS = ("readme", "index", "toc", "template")  # file stems in ADR folders that are not ADRs

_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)\n(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL)
_FIELD_LINE = r"^[ \t]*(?:[-*+][ \t]+)?:?(?:\*\*|__)?{name}(?:\*\*|__)?[ \t]*:(?:\*\*|__)?[ \t]*(.*)$"
_STATUS_LINE = re.compile(_FIELD_LINE.format(name="status"), re.IGNORECASE | re.MULTILINE)
_DATE_LINE = re.compile(_FIELD_LINE.format(name="date"), re.IGNORECASE | re.MULTILINE)
_HEADING = re.compile(r"^#{1,6}[ \t]+(.*)$")
_MD_LINK = re.compile(r"\[[^\]\n]{0,300}\]\(<?([^)\s#>]{1,300}\.(?:md|markdown|rst|txt))(?:#[^)\s]*)?>?\)", re.I)
_DATE_NAME = re.compile(r"^((?:19|20)\d\d)-?(0[1-9]|1[0-2])-?(0[1-9]|[12]\d|3[01])(?:$|[-_. ])")
_LINK_LINE = re.compile(r"(?i)^[\W_]*(supersedes|superseded[ \t]+by)\b(.*)$")
_LINK_TARGETS = re.compile(
    r"(?i)\badr[-_ ]?0*(\d+)|\]\((?:[^)/]{0,200}/){0,8}(?:adr[-_]?)?0*(\d+)[-_.][^)]{0,200}\)"
    r"|\[0*(\d+)[.:\s]|#0*(\d+)\b"
    r"|\b(0\d{2,})\b")


@dataclass(frozen=True)
class Adr:
    """What an ADR file says about itself; links are ADR numbers or linked files, as written."""

    number: int | None
    title: str
    status: Status
    status_word: str  # as written, e.g. "Deprecated"
    date: str | None  # ISO 8601
    body: str
    supersedes: tuple[int | str, ...] = ()  # an ADR number, or the path a Markdown link names
    superseded_by: tuple[int | str, ...] = ()


def in_adr_folder(path: str) -> bool:
    dirs = [d.lower() for d in PurePosixPath(path).parts[:-1]]
    after_docs = any(a in ("docs", "doc", "architecture") and b == "decisions"
                     for a, b in zip(dirs, dirs[1:]))
    return after_docs or any(d in ("adr", "adrs") for d in dirs)


def adr_number(path: str) -> int | None:
    stem = PurePosixPath(path).stem
    if _DATE_NAME.match(stem):  # a date, not a number
        return None
    match = re.match(r"(?i)^(?:adr[-_ ]?)?(\d+)(?:$|[-_. ])", stem)
    return int(match.group(1)) if match else None


def parse_adr(path: str, text: str) -> Adr | None:
    """The ADR in `text`, or None when the file is not an ADR."""
    front, rest = _front_matter(text)
    word, section = _status(front, rest)
    stem = PurePosixPath(path).stem.lower()
    if "template" in stem:
        return None
    if word not in STATUS_WORDS and not (in_adr_folder(path) and stem not in NOT_ADRS):
        return None
    status_lines = [front.get("status", "")] + section
    supersedes, superseded_by = _links(rest.splitlines() + status_lines, front)
    return Adr(number=adr_number(path), title=_title(path, front, rest),
               status=STATUS_WORDS.get(word, "accepted"), status_word=word or "accepted",
               date=_date(front, rest, path), body=_body(rest) or _title(path, front, rest),
               supersedes=supersedes, superseded_by=superseded_by)


def _front_matter(text: str) -> tuple[dict[str, str], str]:
    match = _FRONT_MATTER.match(text)
    if not match:
        return {}, text
    fields = {}
    for line in match.group(1).splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and not key.startswith((" ", "\t")):
            fields[key.strip().lower().replace("_", "-")] = value.strip().strip("'\"")
    return fields, text[match.end():]


def _first_word(value: str) -> str:
    match = re.search(r"[A-Za-z]+", value)
    return match.group(0).lower() if match else ""


def _fields(text: str) -> list[str]:
    """The lines that may hold the record's own fields (`Status:`, `Date:`): its header (before
    the first heading under the title) and its Status section. A `status:` line elsewhere is
    content (an invoice's states, a column's meaning)."""
    header, titled = [], False
    for line in text.splitlines():
        if _heading(line) is not None:
            if titled or not line.startswith("# "):
                break
            titled = True
        else:
            header.append(line)
    return header + _status_section(text)


def _status(front: Mapping[str, str], text: str) -> tuple[str, list[str]]:
    """(status word, lines of the Status section): front matter, a Status: line, a section."""
    section = _status_section(text)
    if front.get("status"):
        return _first_word(front["status"]), section
    for line in _fields(text):
        match = _STATUS_LINE.match(line)
        if match and match.group(1).strip():
            return _first_word(match.group(1)), [match.group(1).strip(), *section]
    words = [_first_word(s) for s in section if _first_word(s) in STATUS_WORDS]
    return (words[0] if words else ""), section


def _heading(line: str) -> str | None:
    """A Markdown heading's text without its closing hashes, or None for other lines."""
    match = _HEADING.match(line)
    return match.group(1).strip().rstrip("#").strip() if match else None


def _status_section(text: str) -> list[str]:
    lines, inside = [], False
    for line in text.splitlines():
        heading = _heading(line)
        if heading is not None:
            inside = heading.lower() == "status"
        elif inside and line.strip():
            lines.append(line.strip())
    return lines


def _links(lines: list[str], front: Mapping[str, str]) -> tuple[tuple[int | str, ...], tuple[int | str, ...]]:
    supersedes: list[int | str] = [n for n in _targets(front.get("supersedes", ""))]
    superseded_by: list[int | str] = [n for n in _targets(front.get("superseded-by", ""))]
    for line in lines:
        match = _LINK_LINE.match(line.strip())
        if match:
            found = _targets(match.group(2))
            (supersedes if match.group(1).lower() == "supersedes" else superseded_by).extend(found)
    return tuple(dict.fromkeys(supersedes)), tuple(dict.fromkeys(superseded_by))


def _targets(text: str) -> list[int | str]:
    """What a link text names: a Markdown link's file (`[Use Redis](20200916-use-redis.md)`,
    resolved against the linking record's folder), else ADR numbers (`ADR-0003`, `#3`, `0003`)."""
    files: list[int | str] = [m.group(1) for m in _MD_LINK.finditer(text)]
    rest = _MD_LINK.sub(" ", text)
    return files + [int(next(g for g in m.groups() if g)) for m in _LINK_TARGETS.finditer(rest)]


def _title(path: str, front: Mapping[str, str], text: str) -> str:
    if front.get("title"):
        return front["title"][:200]
    for line in text.splitlines():
        heading = _heading(line) if line.startswith("# ") else None
        if heading:
            return heading[:200]
    return PurePosixPath(path).stem.replace("-", " ").replace("_", " ")[:200]


def _date(front: Mapping[str, str], text: str, path: str) -> str | None:
    """Front matter's date, a `Date:` line of the record's fields, else a date that starts the
    file name (`2023-01-10-use-rabbit.md`, log4brains' `20200916-use-redis.md`)."""
    match = next((m for line in _fields(text) if (m := _DATE_LINE.match(line))), None)
    named = _DATE_NAME.match(PurePosixPath(path).stem)
    value = front.get("date") or (match.group(1) if match else "") or (
        "-".join(named.groups()) if named else "")
    try:
        parsed = parse_time(value.strip()[:32] or None)
    except InputError:
        return None
    return parsed.isoformat() if parsed else None


def _body(text: str) -> str:
    """The record without what became fields: the title line, Status and Date lines and the
    Status section (the slate shows the status, and a stale one would contradict it). Other
    headings become `Heading:` lines, which read better inside a slate item."""
    out, in_status, titled, in_header = [], False, False, True
    for line in text.splitlines():
        heading = _heading(line)
        if heading is not None:
            in_status = heading.lower() == "status"
            is_title = not titled and line.startswith("# ")
            titled = titled or is_title
            in_header = in_header and is_title
            if not (in_status or is_title):
                out.extend(["", f"{heading}:"])
            continue
        field = in_header and (_STATUS_LINE.match(line) or _DATE_LINE.match(line))
        if not (in_status or field):
            out.append(line)
    text = re.sub(r":\n\s*\n", ":\n", "\n".join(out))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def assign_refs(adrs: Mapping[str, Adr]) -> dict[str, str]:
    """path -> ref. `adr:NNNN` by number; if two files share a number, the first by path keeps
    it and the others are keyed by path."""
    refs: dict[str, str] = {}
    taken: set[int] = set()
    for path in sorted(adrs):
        number = adrs[path].number
        if number is not None and number not in taken:
            taken.add(number)
            refs[path] = f"adr:{number:04d}"
        else:
            refs[path] = f"adr:{path}"
    return refs


def resolve_links(adrs: Mapping[str, Adr], refs: Mapping[str, str]) -> dict[str, str]:
    """path -> ref of the one decision it supersedes. Links come from either side ("Supersedes
    ADR-3" in the new record, "Superseded by ADR-12" in the old); links to records not present,
    and any that would close a cycle, are dropped. The store keeps one predecessor per
    decision: of several, the most recent (highest number) is linked."""
    by_number = {adr.number: path for path, adr in adrs.items()
                 if adr.number is not None and refs[path] == f"adr:{adr.number:04d}"}

    def target(path: str, link: int | str) -> str | None:
        if isinstance(link, int):
            return by_number.get(link)
        linked = posixpath.normpath(posixpath.join(posixpath.dirname(path), link))
        if linked in adrs:
            return linked
        number = adr_number(link)  # a link to a file not watched: by the number in its name
        return by_number.get(number) if number is not None else None

    pairs: set[tuple[str, str]] = set()
    for path, adr in adrs.items():
        pairs |= {(path, old) for link in adr.supersedes if (old := target(path, link)) is not None}
        pairs |= {(new, path) for link in adr.superseded_by if (new := target(path, link)) is not None}
    links: dict[str, str] = {}
    for new, old in sorted(pairs, key=lambda p: (p[0], -(adrs[p[1]].number or 0), p[1])):
        if new == old or new in links or _reaches(links, old, new):
            continue
        links[new] = old
    return {new: refs[old] for new, old in links.items()}


def _reaches(links: Mapping[str, str], start: str, target: str) -> bool:
    seen, current = set(), start
    while current in links and current not in seen:
        seen.add(current)
        current = links[current]
        if current == target:
            return True
    return False


def decision_item(path: str, adr: Adr, ref: str, supersedes: str | None) -> dict[str, Any]:
    """The remember item for an ADR. A status word the store names differently (Deprecated,
    Draft, ...) stays visible as the text's first line."""
    text = adr.body
    if adr.status_word not in (adr.status, ""):
        text = f"Status: {adr.status_word.capitalize()}.\n\n{text}"
    item = {"kind": "decision", "ref": ref, "path": path, "title": adr.title,
            "status": adr.status, "text": text, "at": adr.date, "supersedes": supersedes}
    return {k: v for k, v in item.items() if v is not None}
