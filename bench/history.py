"""A synthetic but realistic coding history, deterministic for a seed.

Sessions of user and assistant turns about files, functions, errors and commands; decisions with
statuses, a share of them superseding an earlier decision on the same concern; file notes with
headings. Entities are Zipf-distributed (a few hot files and functions, a long tail) and their
number grows with the history, so the vocabulary grows as a real project's does.

    items = list(history(100_000, seed=0))   # remember items, in the order a project writes them
    queries(40, seed=0)                       # questions an assistant would ask of it
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any, Iterator

AREAS = ("payments", "ledger", "auth", "billing", "invoices", "webhooks", "search", "uploads",
         "reports", "scheduler", "notifications", "accounts", "exports", "pricing", "audit", "sync")
NOUNS = ("charge", "refund", "invoice", "token", "session", "batch", "event", "payload", "cursor",
         "account", "ledger_entry", "customer", "receipt", "webhook", "schedule", "report", "upload",
         "quota", "price", "currency", "settlement", "dispute", "payout", "retry", "lock", "job")
VERBS = ("parse", "validate", "settle", "apply", "fetch", "render", "enqueue", "reconcile", "sync",
         "compute", "load", "store", "emit", "retry", "refresh", "resolve", "merge", "export")
ERRORS = ("KeyError: 'currency'", "TimeoutError: read timed out after 30s", "IntegrityError: duplicate key "
          "value violates unique constraint", "AssertionError", "TypeError: 'NoneType' object is not "
          "subscriptable", "ConnectionResetError: [Errno 104] Connection reset by peer",
          "ValueError: invalid literal for int() with base 10", "RecursionError: maximum recursion depth "
          "exceeded", "json.decoder.JSONDecodeError: Expecting value", "PermissionError: [Errno 13]",
          "sqlalchemy.exc.OperationalError: database is locked", "ModuleNotFoundError: No module named")
COMMANDS = ("pytest -q {test}", "pytest -x {test} -k {func}", "make lint", "ruff check {path}",
            "mypy {path}", "docker compose up -d postgres", "alembic upgrade head", "git rebase -i main",
            "npm run build", "kubectl rollout restart deploy/{area}-api", "git bisect run pytest {test}")
TOPICS = ("message broker", "retry policy", "idempotency keys", "cache eviction", "id format",
          "logging format", "error budget", "database migrations", "API versioning", "feature flags",
          "secrets storage", "rate limiting", "pagination style", "timezone handling", "money type",
          "queue consumer concurrency", "test fixtures", "deploy strategy", "schema validation")
OPTIONS = ("Kafka", "RabbitMQ", "Redis streams", "SQS", "Postgres advisory locks", "exponential backoff",
           "a fixed schedule", "UUIDv7", "ULID", "JSON lines", "structured logs", "Decimal", "integer cents",
           "cursor pagination", "offset pagination", "blue-green", "canary releases", "pydantic", "attrs")
FILLER = ("I think", "the problem is that", "after the last change", "on staging", "in CI", "locally",
          "intermittently", "only for EUR payments", "when the queue is backed up", "since the upgrade",
          "for large batches", "under load", "on the first request", "with the new config", "again")


def _zipf(rng: random.Random, n: int) -> int:
    """An index in [0, n) drawn with probability roughly proportional to 1 / (rank + 1)."""
    return min(int(n ** rng.random()) - 1, n - 1)


class Project:
    """The entities of one synthetic project; their number grows with the history's size."""

    def __init__(self, units: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.files = max(40, int(units ** 0.62))
        self.functions = 3 * self.files

    def path(self, i: int) -> str:
        area, noun = AREAS[i % len(AREAS)], NOUNS[(i // len(AREAS)) % len(NOUNS)]
        suffix = i // (len(AREAS) * len(NOUNS))
        return f"src/{area}/{noun}{'_' + str(suffix) if suffix else ''}.py"

    def func(self, i: int) -> str:
        verb, noun = VERBS[i % len(VERBS)], NOUNS[(i // len(VERBS)) % len(NOUNS)]
        suffix = i // (len(VERBS) * len(NOUNS))
        return f"{verb}_{noun}{suffix or ''}"

    def test_of(self, path: str) -> str:
        return "tests/test_" + path.rsplit("/", 1)[-1]

    def pick(self) -> tuple[str, str, str]:
        rng = self.rng
        return self.path(_zipf(rng, self.files)), self.func(_zipf(rng, self.functions)), rng.choice(ERRORS)

    def command(self, path: str, func: str) -> str:
        area = path.split("/")[1]
        return self.rng.choice(COMMANDS).format(test=self.test_of(path), func=func, path=path, area=area)


def _user_turn(p: Project, path: str, func: str, error: str, i: int) -> str:
    r = p.rng
    return r.choice((
        f"Running {p.command(path, func)} fails with {error} {r.choice(FILLER)}. Can you look at {func} in {path}?",
        f"{func} still raises {error.split(':')[0]} {r.choice(FILLER)}; the traceback points at line {r.randint(20, 400)} of {path}.",
        f"Can we make {func} handle an empty {r.choice(NOUNS)} list? It should return early instead of calling {p.func(_zipf(r, p.functions))}.",
        f"Please add a test for {func} covering the {r.choice(NOUNS)} case, then run {p.command(path, func)}.",
        f"Why does {path} import {p.path(_zipf(r, p.files))}? It looks like a cycle {r.choice(FILLER)}.",
        f"OK, that works. Next, rename {func} to {r.choice(VERBS)}_{r.choice(NOUNS)} and update the callers.",
    ))


def _assistant_turn(p: Project, path: str, func: str, error: str, i: int) -> str:
    r = p.rng
    other = p.func(_zipf(r, p.functions))
    return r.choice((
        f"I traced {error.split(':')[0]} to {func} in {path}: it reads the {r.choice(NOUNS)} before {other} "
        f"has set it. I moved the lookup after the call and added a guard; {p.command(path, func)} passes now "
        f"({r.randint(3, 120)} tests).",
        f"The failure comes from {other}, which {func} calls with a stale {r.choice(NOUNS)}. I changed "
        f"{path} to pass the fresh value and left a comment explaining why.",
        f"Added test_{func}_{r.choice(NOUNS)} to {p.test_of(path)}. It failed before the fix with {error} "
        f"and passes after it. Ran {p.command(path, func)}: all green.",
        f"Done: {func} now returns early on an empty list, and {other} no longer retries forever. "
        f"I also ran {p.command(path, func)}, which reported {r.randint(0, 3)} warnings about deprecated calls.",
        f"The import cycle is between {path} and {p.path(_zipf(r, p.files))}. I moved {other} into a "
        f"small helper module so neither imports the other.",
    ))


def _decision(p: Project, k: int, latest: dict[str, str], at: datetime) -> dict[str, Any]:
    r = p.rng
    topic = f"{r.choice(TOPICS)} for {AREAS[_zipf(r, len(AREAS))]}"
    option = r.choice(OPTIONS)
    item = {"kind": "decision", "ref": f"dec-{k}", "title": f"Use {option} for the {topic}",
            "text": f"We use {option} for the {topic}. Reason: it keeps {r.choice(NOUNS)} handling simple "
                    f"and {r.choice(FILLER)} the alternative caused {r.choice(ERRORS).split(':')[0]} in "
                    f"{p.path(_zipf(r, p.files))}.",
            "status": r.choices(("accepted", "proposed", "rejected"), (0.7, 0.2, 0.1))[0],
            "at": at.isoformat()}
    if topic in latest and r.random() < 0.6:
        item["supersedes"] = latest[topic]
        item["status"] = "accepted"
    if item["status"] == "accepted":
        latest[topic] = item["ref"]
    return item


def _note(p: Project, k: int, at: datetime) -> dict[str, Any]:
    r = p.rng
    path = p.path(_zipf(r, p.files))
    funcs = ", ".join(p.func(_zipf(r, p.functions)) for _ in range(3))
    text = (f"# {path}\n\n{path} holds {funcs}. It is called from {p.path(_zipf(r, p.files))} "
            f"{r.choice(FILLER)}.\n\nGotchas: watch for {r.choice(ERRORS)} when the {r.choice(NOUNS)} is "
            f"missing; run {p.command(path, funcs.split(',')[0])} after edits.")  # one heading: one unit
    return {"kind": "note", "path": f"docs/notes/{k:07d}-{path.replace('/', '-')}.md", "text": text,
            "at": at.isoformat()}


def history(units: int, seed: int = 0, start: datetime = datetime(2024, 1, 8, 9, 0)) -> Iterator[dict[str, Any]]:
    """`units` remember items (one stored unit each): about 96% turns in sessions of 8-40 turns,
    3% file notes, 1% decisions (a third of them superseding an earlier one)."""
    p = Project(units, seed)
    r = p.rng
    latest: dict[str, str] = {}
    at, made, session_no, decisions, notes = start, 0, 0, 0, 0
    while made < units:
        session_no += 1
        session = f"s{seed}-{session_no:06d}"
        path, func, error = p.pick()
        for i in range(min(r.randint(8, 40), units - made)):
            at += timedelta(seconds=r.randint(20, 240))
            roll = r.random()
            if roll < 0.01:
                decisions += 1
                yield _decision(p, decisions, latest, at)
            elif roll < 0.04:
                notes += 1
                yield _note(p, notes, at)
            else:
                role = "user" if i % 2 == 0 else "assistant"
                make = _user_turn if role == "user" else _assistant_turn
                yield {"kind": "turn", "role": role, "session": session, "at": at.isoformat(),
                       "text": make(p, path, func, error, i)}
            made += 1
        at += timedelta(hours=r.choice((1, 2, 3, 16, 20, 64)))


def queries(n: int, units: int, seed: int = 0) -> list[str]:
    """Questions about the history's hot and tail entities, as an assistant would ask them."""
    p = Project(units, seed)
    r = random.Random(seed + 1000)
    out: dict[str, None] = {}  # distinct, in order: a repeated query would hit warm caches
    while len(out) < n:
        path, func = p.path(_zipf(r, p.files)), p.func(_zipf(r, p.functions))
        out.setdefault(r.choice((
            f"Why does {func} raise {r.choice(ERRORS).split(':')[0]}?",
            f"What did we decide about the {r.choice(TOPICS)} for {r.choice(AREAS)}?",
            f"How do I run the tests for {path}?",
            f"{r.choice(ERRORS)} when running {p.command(path, func)}",
            f"Where is {func} called from, and what did we change in {path}?",
            f"Is there a note about {path} and its gotchas?",
        )))
    return list(out)
