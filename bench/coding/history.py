"""The writer of one project's history: sessions of turns, decisions and notes in `remember` form,
in time order, and the questions asked of it.

Storylines (story.py) schedule their moments as events; `History.run` writes the events in time
order, each main event opening a session that may also carry a few inserts (a fact told in
passing, a distractor exchange) so that sessions mix threads the way real ones do.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable

from facts import AREAS

WEEKS = 26


def cap(text: str) -> str:
    return text[:1].upper() + text[1:]


@dataclass(frozen=True)
class Project:
    name: str
    stack: str  # python, ts or go
    domain: str  # singular noun of what the service handles
    domains: str
    people: tuple[str, ...]
    start: datetime  # a Monday, 00:00
    session_style: str  # "dated" (2026-03-02-broker) or "hex" (captured-client style ids)

    def fill(self, text: str, **values: Any) -> str:
        return text.format(domain=self.domain, domains=self.domains, service=self.name, **values)

    @property
    def end(self) -> datetime:
        return self.start + timedelta(weeks=WEEKS)


@dataclass
class Event:
    at: datetime
    slug: str
    write: Callable[["Session"], None]
    insert: bool = False  # an insert rides along in the next main session


class Session:
    """Turns of one session, a minute or a few apart; decisions and notes stamped in between."""

    def __init__(self, history: "History", key: str, start: datetime) -> None:
        self.history, self.key, self.now = history, key, start

    def tick(self, rng: random.Random, lo: int = 40, hi: int = 240) -> datetime:
        self.now += timedelta(seconds=rng.randint(lo, hi))
        return self.now

    def turn(self, role: str, text: str, speaker: str | None = None) -> str:
        h = self.history
        h.turns += 1
        ref = f"t{h.turns}"
        item = {"kind": "turn", "ref": ref, "session": self.key, "role": role,
                "at": self.tick(h.rng).isoformat(), "text": text}
        if role == "user":
            item["speaker"] = speaker or h.project.people[0]
        h.items.append(item)
        h.times[ref] = self.now
        return ref

    def user(self, text: str, speaker: str | None = None) -> str:
        return self.turn("user", text, speaker)

    def assistant(self, text: str) -> str:
        return self.turn("assistant", text)

    def decision(self, title: str, text: str, status: str, supersedes: str | None = None) -> str:
        h = self.history
        h.decisions += 1
        ref = f"dec-{h.decisions}"
        item = {"kind": "decision", "ref": ref, "title": title, "text": text, "status": status,
                "at": self.tick(h.rng, 20, 60).isoformat()}
        if supersedes:
            item["supersedes"] = supersedes
        h.items.append(item)
        h.times[ref] = self.now
        return ref

    def note(self, path: str, text: str) -> str:
        h = self.history
        h.items.append({"kind": "note", "path": path, "text": text, "at": self.tick(h.rng, 30, 120).isoformat()})
        h.times[path] = self.now
        return path


@dataclass
class History:
    project: Project
    rng: random.Random
    items: list[dict[str, Any]] = field(default_factory=list)
    questions: list[dict[str, Any]] = field(default_factory=list)
    times: dict[str, datetime] = field(default_factory=dict)  # ref -> when it was written
    events: list[Event] = field(default_factory=list)
    turns: int = 0
    decisions: int = 0
    phrases: dict[str, list[str]] = field(default_factory=dict)  # question templates by kind (phrasing.ASK)
    paths: list[str] = field(default_factory=list)  # the project's files, one per role (facts.AREAS)
    items_by_ref: dict[str, dict[str, Any]] = field(default_factory=dict)

    def area_path(self, area: str) -> str:
        return self.project.fill(AREAS[area]["path"][self.project.stack])

    def at(self, week: float, after: datetime | None = None) -> datetime:
        """A working-hours moment (weekdays, 09:00-17:30) on the day `week` falls on, or on the
        next working day, and at least two hours after `after`."""
        day = self.project.start + timedelta(days=int(min(max(week, 0), WEEKS - 0.2) * 7))
        while True:
            while day.weekday() > 4:
                day += timedelta(days=1)
            moment = day + timedelta(hours=9, minutes=self.rng.randint(0, 510))
            if after is None or moment >= after + timedelta(hours=2):
                return moment
            day += timedelta(days=1)

    def schedule(self, week: float, slug: str, write: Callable[[Session], None], insert: bool = False,
                 after: datetime | None = None) -> datetime:
        """Plan a moment of a storyline; returns its time, for the moments that must follow it."""
        event = Event(self.at(week, after), slug, write, insert)
        self.events.append(event)
        return event.at

    def session_key(self, start: datetime, slug: str) -> str:
        if self.project.session_style == "dated":
            return f"{start:%Y-%m-%d}-{slug}"
        return "".join(self.rng.choice(string.hexdigits.lower()[:16]) for _ in range(8))

    def run(self) -> None:
        """Write every event in time order; inserts join the next main session."""
        pending: list[Event] = []
        for event in sorted(self.events, key=lambda e: e.at):
            if event.insert:
                pending.append(event)
                continue
            session = Session(self, self.session_key(event.at, event.slug), event.at)
            split = self.rng.randint(0, len(pending))  # inserts keep their order around the main thread
            before, after = pending[:split], pending[split:]
            for e in before:
                e.write(session)
            event.write(session)
            for e in after:
                e.write(session)
            pending = []
        if pending:  # inserts after the last main event get a session of their own
            session = Session(self, self.session_key(pending[0].at, "misc"), pending[0].at)
            for e in pending:
                e.write(session)

    def ask(self, kind: str, text: str, evidence: list[str], as_of: datetime, answer: str) -> None:
        late = [r for r in evidence if self.times[r] > as_of]
        assert not late, f"{self.project.name}: evidence {late} is recorded after the question ({text})"
        self.questions.append({"project": self.project.name, "kind": kind, "text": cap(text),
                               "as_of": as_of.replace(microsecond=0).isoformat(), "evidence": evidence,
                               "answer": answer})

    def after(self, ref_or_time: str | datetime, until: datetime | None = None) -> datetime:
        """A moment to ask at: some time after an event (up to `until`, default the project's end
        plus a week)."""
        start = self.times[ref_or_time] if isinstance(ref_or_time, str) else ref_or_time
        end = until or self.project.end + timedelta(days=7)
        span = (end - start).total_seconds()
        assert span > 120, f"no time to ask between {start} and {end}"
        lead = min(3600.0, span / 4)  # not in the same minute as the evidence
        return start + timedelta(seconds=lead + self.rng.random() * (span - 2 * lead))
