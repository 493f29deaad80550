"""Readers for the public benchmarks in their original formats (LoCoMo, LongMemEval).

Each file becomes one `Case`: the items to remember (through the product's own write path) and
the questions asked of them, with their evidence as refs of the stored turns.
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

Dataset = Literal["locomo", "longmemeval"]
DATASETS: tuple[str, ...] = ("locomo", "longmemeval")


@dataclass(frozen=True)
class Question:
    qid: str
    text: str
    evidence: frozenset[str]  # refs of the evidence turns
    category: str
    as_of: datetime | None


@dataclass(frozen=True)
class Case:
    case_id: str
    items: list[dict[str, Any]]
    questions: list[Question]


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


def read_cases(dataset: str, paths: list[Path]) -> Iterator[Case]:
    reader = {"locomo": locomo_case, "longmemeval": longmemeval_case}.get(dataset)
    if reader is None:
        raise InputError(f"unknown dataset {dataset!r}; use one of: {', '.join(DATASETS)}")
    for path in files_under(paths):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"{path}: not a readable JSON file ({exc})") from exc
        records = record if isinstance(record, list) else [record]  # full releases are lists
        for i, rec in enumerate(records):
            yield reader(rec, path.stem if len(records) == 1 else f"{path.stem}-{i}")


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
    return Case(case_id, items, questions)


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
    return Case(case_id, items, questions)
