"""Readers for the benchmarks in their original formats: LoCoMo, LongMemEval and the project's own
coding-memory set (docs/coding-benchmark.md).

Each file becomes one `Case`: the items to remember per project (through the product's own write
path) and the questions asked of them, with their evidence as refs of the stored units.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Iterator, Literal

from agentmemrec.indexing.errors import InputError
from agentmemrec.indexing.units import parse_time
from agentmemrec.ranking.eval.options import DATASETS

Dataset = Literal["locomo", "longmemeval", "coding"]
PROJECT = "eval"  # the project a single-project benchmark is written to
CODING_FORMAT = "agentmemrec-coding/1"
CODING_KINDS = ("single", "multi", "status", "temporal", "paraphrase", "unanswerable")
UNANSWERABLE = "unanswerable"


@dataclass(frozen=True)
class Question:
    qid: str
    text: str
    evidence: frozenset[str]  # refs of the evidence units, in the question's project
    category: str
    as_of: datetime | None
    project: str = PROJECT

    @property
    def answerable(self) -> bool:
        """Unanswerable questions (coding set) have no confirmed answer stored: their evidence,
        if any, is the proposed or rejected decision a slate must show as such."""
        return self.category != UNANSWERABLE


@dataclass(frozen=True)
class Case:
    case_id: str
    projects: dict[str, list[dict[str, Any]]]  # project -> items, in writing order
    questions: list[Question]


def item_refs(items: list[Any]) -> set[str]:
    """The refs a coding-set question's evidence may name: each item's ref, else its path."""
    return {it.get("ref") or it.get("path") for it in items if isinstance(it, dict)}


def files_under(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            out.extend(sorted(p for p in path.iterdir() if p.suffix == ".json"))
        elif path.is_file():
            out.append(path)
        else:
            raise InputError(f"{path} does not exist; pass benchmark files or directories of them")
    if not out:
        raise InputError(f"no .json files under {', '.join(map(str, paths))}")
    return out


def fingerprint(dataset: str, paths: list[Path]) -> dict[str, Any]:
    """Exactly which files a run read: each file's name and the SHA-256 of its bytes."""
    files = [{"name": f.name, "sha256": hashlib.sha256(f.read_bytes()).hexdigest()} for f in files_under(paths)]
    return {"dataset": dataset, "files": files}


def data_digest(data: list[dict[str, Any]]) -> str:
    """One hash over the fingerprints' files, in order: equal digests, equal training data."""
    return hashlib.sha256("".join(f["sha256"] for d in data for f in d["files"]).encode()).hexdigest()


# What a record of each format holds, to tell a file of another format before reading it
FORMATS = {"locomo": ("LoCoMo", 'an object with "qa" and "speaker_a", "session_1", ... (or them inside '
                      '"conversation"), or a list of them'),
           "longmemeval": ("LongMemEval", 'an object with "question", "question_date", "haystack_dates" and '
                           '"haystack_sessions", or a list of them')}


def read_cases(dataset: str, paths: list[Path]) -> Iterator[Case]:
    reader = {"locomo": locomo_case, "longmemeval": longmemeval_case, "coding": coding_case}.get(dataset)
    if reader is None:
        raise InputError(f"unknown dataset {dataset!r}; use one of: {', '.join(DATASETS)}")
    for path in files_under(paths):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"{path}: not a readable JSON file ({exc})") from exc
        records = record if isinstance(record, list) else [record]  # full releases are lists
        if not records:
            raise InputError(f"no questions found in {path}: it holds an empty list")
        for i, rec in enumerate(records):
            if dataset in FORMATS and not _is_format(dataset, rec):
                name, expected = FORMATS[dataset]
                raise InputError(f"{path} is not a {name} file (expected {expected}); check the dataset "
                                 f"argument ({', '.join(DATASETS)})")
            try:
                case = reader(rec, path.stem if len(records) == 1 else f"{path.stem}-{i}")
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                name = FORMATS.get(dataset, ("coding benchmark",))[0]
                raise InputError(f"{path}: a malformed {name} record ({type(exc).__name__}: {exc})") from exc
            yield case


def read_questions(dataset: str, paths: list[Path]) -> list[Case]:
    """Every case of the files, refused if they hold no question at all (a run would measure nothing)."""
    cases = list(read_cases(dataset, paths))
    if not any(c.questions for c in cases):
        raise InputError(f"no questions found in {', '.join(map(str, paths))} (read as {dataset}: adversarial "
                         "and unlabelled questions are left out); check the files and the dataset argument")
    return cases


def _is_format(dataset: str, rec: Any) -> bool:
    if not isinstance(rec, dict):
        return False
    if dataset == "locomo":
        conv = rec.get("conversation", rec)
        return isinstance(rec.get("qa"), list) and isinstance(conv, dict) and any(
            re.fullmatch(r"session_\d+", k) for k in conv)
    return all(k in rec for k in ("question", "question_date", "haystack_dates", "haystack_sessions"))


def _locomo_time(text: str) -> datetime:
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")


def locomo_case(record: dict[str, Any], case_id: str) -> Case:
    conv = record.get("conversation", record)  # the full release nests it; the dev copies do not
    case_id = str(record.get("sample_id", case_id))
    roles = {conv.get("speaker_a"): "user", conv.get("speaker_b"): "assistant"}
    items: list[dict[str, Any]] = []
    sessions = sorted((int(m.group(1)), key) for key in conv
                      if (m := re.fullmatch(r"session_(\d+)", key)))
    for number, key in sessions:
        start = _locomo_time(conv[f"{key}_date_time"])
        for i, turn in enumerate(conv[key]):
            text = turn["text"]
            if turn.get("blip_caption"):
                text = f"{text} [shares a photo: {turn['blip_caption']}]"
            items.append({"kind": "turn", "ref": turn["dia_id"], "session": f"session_{number}",
                          "speaker": turn["speaker"], "role": roles.get(turn["speaker"], "user"),
                          "at": (start + timedelta(seconds=i)).isoformat(), "text": text})
    known = {it["ref"] for it in items}
    # LoCoMo's questions are asked after the conversation and carry no date: as of its last turn,
    # so features measured against `as_of` (age_days) do not move with the day a run is made
    asked = max((datetime.fromisoformat(it["at"]) for it in items), default=None)
    questions = []
    for n, qa in enumerate(record.get("qa", [])):
        # a few annotations pack two ids into one string ("D8:6; D9:17"): split them
        ids = {part.strip() for e in qa.get("evidence", []) for part in str(e).split(";")}
        evidence = frozenset(ids & known)
        if str(qa.get("category")) == "5" or not evidence:  # adversarial or unlabelled
            continue
        questions.append(Question(f"{case_id}:{n}", qa["question"], evidence,
                                  str(qa.get("category")), asked))
    return Case(case_id, {PROJECT: items}, questions)


def _lme_time(text: str) -> datetime:
    return datetime.strptime(re.sub(r"\s*\(\w+\)\s*", " ", text).strip(), "%Y/%m/%d %H:%M")


def longmemeval_case(record: dict[str, Any], case_id: str) -> Case:
    case_id = str(record.get("question_id", case_id))
    items: list[dict[str, Any]] = []
    evidence: set[str] = set()
    for s, (date, turns) in enumerate(zip(record["haystack_dates"], record["haystack_sessions"])):
        # the haystack's own session ids name the evidence sessions (`answer_...`): a slate shows
        # its sessions' keys, so they would label the evidence for any model reading it
        session = f"session_{s + 1}"
        start = _lme_time(date)
        for t, turn in enumerate(turns):
            if not str(turn.get("content", "")).strip():
                continue
            ref = f"{s}:{t}"
            items.append({"kind": "turn", "ref": ref, "session": session, "role": turn["role"],
                          "at": (start + timedelta(seconds=t)).isoformat(), "text": turn["content"]})
            if turn.get("has_answer"):
                evidence.add(ref)
    questions = []
    if evidence:
        # question_date's time of day is not a cut-off the data respects (23 development questions
        # have evidence sessions later on the same day, none on a later day): use the day's end.
        as_of = _lme_time(record["question_date"]).replace(hour=23, minute=59, second=59)
        questions.append(Question(case_id, record["question"], frozenset(evidence),
                                  str(record.get("question_type")), as_of))
    return Case(case_id, {PROJECT: items}, questions)


def coding_case(record: dict[str, Any], case_id: str) -> Case:
    """The coding-memory format: every project's items in `remember` form, written to one store
    (so a slate that shows another project's unit is caught), and questions naming their project,
    time asked, evidence refs and kind. Items are validated when written; here the questions are
    checked against the items, so a broken file fails before anything runs."""
    where = f"coding benchmark {case_id}"
    if not isinstance(record, dict) or record.get("format") != CODING_FORMAT:
        raise InputError(f"{where}: not a coding benchmark (expected \"format\": \"{CODING_FORMAT}\"; "
                         "see docs/coding-benchmark.md)")
    projects = {name: body.get("items") for name, body in (record.get("projects") or {}).items()}
    if not projects or not all(isinstance(items, list) and items for items in projects.values()):
        raise InputError(f"{where}: \"projects\" must map each project name to {{\"items\": [...]}}")
    refs = {name: item_refs(items) for name, items in projects.items()}
    questions = [_coding_question(q, i, where, refs) for i, q in enumerate(record.get("questions") or [])]
    if not questions:
        raise InputError(f"{where}: no questions")
    return Case(str(record.get("name", case_id)), projects, questions)


def _coding_question(q: Any, i: int, where: str, refs: dict[str, set[str]]) -> Question:
    qid = str(q.get("id", i)) if isinstance(q, dict) else str(i)
    at = f"{where}, question {qid}"
    if not isinstance(q, dict) or not isinstance(q.get("text"), str) or not q["text"].strip():
        raise InputError(f"{at}: each question needs \"text\", \"project\", \"kind\" and \"evidence\" "
                         "(and \"as_of\", the time it is asked)")
    if q.get("project") not in refs:
        raise InputError(f"{at}: project {q.get('project')!r} has no items; use one of: {', '.join(sorted(refs))}")
    if q.get("kind") not in CODING_KINDS:
        raise InputError(f"{at}: unknown kind {q.get('kind')!r}; use one of: {', '.join(CODING_KINDS)}")
    evidence = q.get("evidence")
    if not isinstance(evidence, list) or (not evidence and q["kind"] != UNANSWERABLE):
        raise InputError(f"{at}: evidence must be a list of refs (empty only for an unanswerable question)")
    unknown = sorted(set(evidence) - refs[q["project"]])
    if unknown:
        raise InputError(f"{at}: evidence {unknown} names no item of project {q['project']!r}")
    as_of = parse_time(q.get("as_of"), f"{at}: as_of")  # absent: asked after everything was written
    return Question(qid, q["text"], frozenset(evidence), q["kind"], as_of, q["project"])
