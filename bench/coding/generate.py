"""Generate the coding-memory benchmark: project histories in `remember` form and labelled questions.

    python bench/coding/generate.py                     # writes bench/coding/coding-dev.json
    python bench/coding/generate.py --set holdout       # the separately written projects

Everything is drawn from the hand-written scenarios (topics.py, bugs.py, facts.py, phrasing.py;
holdout.py for the held-out set) with a fixed seed, so the committed JSON is reproducible. The
format is documented in docs/coding-benchmark.md.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import facts as F  # noqa: E402
import phrasing as P  # noqa: E402
from bugs import BUGS  # noqa: E402
from history import History, Project, Session  # noqa: E402
from story import TopicStory, bug_story, distractor, fact_story, option_values, usable  # noqa: E402
from tasks import TASKS  # noqa: E402
from topics import TOPICS  # noqa: E402

FORMAT = "agentmemrec-coding/1"
SEED = 16
DEV_PROJECTS = [
    Project("payments-api", "python", "payment", "payments", ("dana", "marco", "yuki"), datetime(2026, 1, 5), "dated"),
    Project("billing-service", "python", "invoice", "invoices", ("priya", "sam", "olu"), datetime(2025, 11, 3), "hex"),
    Project("checkout-web", "ts", "order", "orders", ("lea", "jonas", "mira"), datetime(2026, 2, 2), "dated"),
    Project("ledger-worker", "go", "transfer", "transfers", ("kwame", "ines", "theo"), datetime(2025, 10, 6), "hex"),
    Project("payouts-service", "python", "payout", "payouts", ("aiko", "ben", "carla"), datetime(2026, 3, 2), "dated"),
]
SHAPES = ["stable", "stable", "switch", "switch", "switch", "chain", "proposed", "proposed-only", "rejected",
          "rejected-only"]


@dataclass(frozen=True)
class Scenarios:
    """The hand-written material one set is generated from."""

    topics: list[dict]
    bugs: list[dict]
    facts: list[dict]
    ask: dict[str, list[str]]  # question templates by kind


DEV = Scenarios(TOPICS, BUGS, F.FACTS, P.ASK)


class Generator:
    def __init__(self, project: Project, rng: random.Random, scenarios: Scenarios) -> None:
        self.h = History(project, rng, phrases=scenarios.ask)
        self.s = scenarios
        self.adrs = 0
        self.later: list = []
        self.h.paths = [project.fill(a["path"][project.stack]) for a in F.AREAS.values()]

    def adr_number(self) -> int:
        self.adrs += 1
        return self.adrs

    def plan(self) -> list[str]:
        """Schedule every storyline; return the keys of the topics this project decides."""
        h, r = self.h, self.h.rng
        stack = h.project.stack
        candidates = [t for t in self.s.topics if len(usable(t, stack)) >= 2]
        chosen = r.sample(candidates, min(14, len(candidates)))
        shapes = r.sample(SHAPES, len(SHAPES)) + [r.choice(SHAPES) for _ in range(len(chosen) - len(SHAPES))]
        stories = []
        for topic, shape in zip(chosen, shapes):
            if shape == "chain" and len(usable(topic, stack)) < 3:
                shape = "switch"
            story = TopicStory(h, topic, shape, self.adr_number)
            story.schedule()
            stories.append(story)
        self.later += [s.questions for s in stories]
        for bug in r.sample(self.s.bugs, min(7, len(self.s.bugs))):
            self.later.append(bug_story(h, bug, 100 + r.randint(10, 890)))
        for fact in r.sample(self.s.facts, min(10, len(self.s.facts))):
            self.later.append(fact_story(h, fact, r.random() < 0.5))
        self.notes(r.sample(sorted(F.AREAS), 10))
        for dialogue in r.sample(F.DISTRACTORS, 26):
            h.schedule(r.uniform(0, 26), "chat", distractor(h, dialogue), insert=r.random() < 0.4)
        for dialogue in r.sample(TASKS, 28):
            h.schedule(r.uniform(0, 26), "work", distractor(h, dialogue, h.project), insert=r.random() < 0.3)
        self.hearsay(stories)
        return [t["key"] for t in chosen]

    def notes(self, areas: list[str]) -> None:
        h, r = self.h, self.h.rng
        for area in areas:
            spec = F.AREAS[area]
            path, text = h.project.fill(spec["path"][h.project.stack]), h.project.fill(spec["note"])

            def write(s: Session, path: str = path, text: str = text) -> None:
                s.note(path, text)
            h.schedule(r.uniform(0, 20), "notes", write, insert=True)

            def ask(spec: dict = spec, path: str = path) -> None:
                if r.random() < 0.6:
                    h.ask("single", h.project.fill(spec["ask"]), [path], h.after(path), path)
            self.later.append(ask)

    def hearsay(self, stories: list[TopicStory]) -> None:
        """Options a project never chose, mentioned in passing: near-duplicates of real evidence."""
        h, r = self.h, self.h.rng
        for story in r.sample(stories, min(8, len(stories))):
            option = story.opts[-1]
            values = option_values("X", option)
            text = h.project.fill(r.choice(F.HEARSAY).format(option=option["name"], con=values["Xcon1"], pro=values["Xpro1"]))

            def write(s: Session, text: str = text) -> None:
                s.user(text, r.choice(h.project.people))
                s.assistant(r.choice(["Good to know.", "Worth keeping in mind.", "Noted, though it doesn't change our plans."]))
            h.schedule(r.uniform(0, 26), "chat", write, insert=True)
        for story in r.sample(stories, min(4, len(stories))):
            def mention(s: Session, story: TopicStory = story) -> None:
                if story.current is not None:
                    s.user(h.project.fill(r.choice(P.MENTION), current=story.current["name"], **story.base),
                           r.choice(h.project.people))
            h.schedule(r.uniform(14, 26), "chat", mention, insert=True)

    def run(self) -> History:
        self.h.run()
        self.h.items_by_ref = {it.get("ref", it.get("path")): it for it in self.h.items}
        for ask in self.later:
            ask()
        return self.h


def absent_questions(histories: list[History], decided: dict[str, list[str]], topics: list[dict],
                     rng: random.Random) -> None:
    """Topics a project never discussed but another project decided: the answer is that nothing is
    stored here, while a near-duplicate sits one project away."""
    by_key = {t["key"]: t for t in topics}
    for h in histories:
        elsewhere = sorted({k for p, keys in decided.items() if p != h.project.name for k in keys}
                           - set(decided[h.project.name]))
        for key in rng.sample(elsewhere, min(3, len(elsewhere))):
            topic = by_key[key]
            values = {"noun": topic["noun"], "short": h.project.fill(topic["short"]),
                      "purpose": h.project.fill(topic["purpose"][0])}
            h.ask("unanswerable", h.project.fill(rng.choice(topic["asks"]), **values), [],
                  h.after(h.project.start + timedelta(weeks=20)), "nothing about this is stored in this project")


def generate(projects: list[Project], scenarios: Scenarios, seed: int) -> dict:
    rng = random.Random(seed)
    histories, decided = [], {}
    for project in projects:
        gen = Generator(project, random.Random(rng.getrandbits(32)), scenarios)
        decided[project.name] = gen.plan()
        histories.append(gen.run())
    absent_questions(histories, decided, scenarios.topics, rng)
    questions = [q for h in histories for q in h.questions]
    for i, q in enumerate(questions, 1):
        q["id"] = f"q{i:03d}"
    return {"format": FORMAT, "seed": seed,
            "projects": {h.project.name: {"items": h.items} for h in histories},
            "questions": [{k: q[k] for k in ("id", "project", "kind", "text", "as_of", "evidence", "answer")}
                          for q in questions]}


def dump(data: dict) -> str:
    """JSON with one item or question per line: small, and a regenerated set diffs line by line."""
    def rows(values: list) -> str:
        return "[\n" + ",\n".join(json.dumps(v, ensure_ascii=False) for v in values) + "\n]"
    projects = ",\n".join(f'{json.dumps(name)}: {{"items": {rows(p["items"])}}}' for name, p in data["projects"].items())
    return (f'{{"format": {json.dumps(data["format"])}, "seed": {data["seed"]},\n"projects": {{\n{projects}\n}},\n'
            f'"questions": {rows(data["questions"])}\n}}\n')


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=["dev", "holdout"], default="dev")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.set == "dev":
        data = generate(DEV_PROJECTS, DEV, args.seed)
    else:
        import holdout  # noqa: PLC0415
        data = generate(holdout.PROJECTS, Scenarios(holdout.TOPICS, holdout.BUGS, holdout.FACTS, holdout.ASK),
                        args.seed)
    out = args.out or HERE / f"coding-{args.set}.json"
    out.write_text(dump(data))
    units = sum(len(p["items"]) for p in data["projects"].values())
    kinds: dict[str, int] = {}
    for q in data["questions"]:
        kinds[q["kind"]] = kinds.get(q["kind"], 0) + 1
    print(f"{out}: {len(data['projects'])} projects, {units} items, {len(data['questions'])} questions {kinds}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
