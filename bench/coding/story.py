"""Storylines: how a topic's decisions, a bug, a fact or a file note unfold in one project, and the
questions each of them supports.

Every storyline schedules its moments on the project's timeline (History.schedule) and, once the
history is written, asks questions whose evidence refs and times come from what was written.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Callable

from agentmemrec.ranking.features import content_terms

import phrasing as P
from history import History, Project, Session, cap


def version(option: dict, stack: str) -> str:
    return option["version"].get(stack) or option["version"]["any"]


def usable(topic: dict, stack: str) -> list[dict]:
    return [o for o in topic["options"] if stack in o.get("stacks", [stack])]


def option_values(prefix: str, option: dict) -> dict[str, str]:
    out = {prefix: option["name"]}
    for key in ("pros", "cons"):
        for i, text in enumerate(option[key]):
            out[f"{prefix}{key[:3]}{i}"] = text
            out[f"{prefix}{key[:3]}{i}cap"] = cap(text)
    return out


def paraphrase(h: History, templates: list[str], evidence: list[str], values: dict[str, str]) -> str | None:
    """The first template (in a seeded order) sharing no content word with the evidence."""
    texts = [it.get("title", "") + " " + it.get("path", "") + " " + it["text"]
             for it in h.items if it.get("ref", it.get("path")) in evidence]
    used = set().union(*(content_terms(t) for t in texts))
    for template in h.rng.sample(templates, len(templates)):
        text = h.project.fill(template, **values)
        if not content_terms(text) & used:
            return text
    return None


class TopicStory:
    """A topic decided in one of five ways: stable, switch (with or without a rejected third
    option), chain (two successive replacements), proposed (never confirmed), rejected."""

    def __init__(self, h: History, topic: dict, shape: str, adr_number: Callable[[], int]) -> None:
        self.h, self.topic, self.shape, self.adr_number = h, topic, shape, adr_number
        opts = h.rng.sample(usable(topic, h.project.stack), len(usable(topic, h.project.stack)))
        self.opts = opts
        p = h.project
        self.base = {"noun": topic["noun"], "short": p.fill(topic["short"]),
                     "shortcap": cap(p.fill(topic["short"])), "purpose": p.fill(h.rng.choice(topic["purpose"]))}
        self.dec: dict[str, str] = {}  # option name -> decision ref
        self.detail: dict[str, str] = {}  # option name -> ref of the turn stating its setup
        self.when: dict[str, datetime] = {}
        self.current: dict | None = None

    def v(self, **roles: dict) -> dict[str, str]:
        """Template values: the base, each role's option values, the first role's version and detail."""
        out = dict(self.base)
        for prefix, option in roles.items():
            out.update(option_values(prefix, option))
        first = next(iter(roles.values()))
        out["version"] = version(first, self.h.project.stack)
        out["detail"] = self.h.project.fill(first["detail"][0])
        out["path"] = self.h.area_path(self.topic["area"]) if "area" in self.topic else None
        out["person"] = self.h.rng.choice(self.h.project.people[1:])
        out["other"] = self.h.rng.choice(self.h.project.people[1:])
        out["current"] = self.current["name"] if self.current else "what we have"
        return out

    def schedule(self) -> None:
        h, r = self.h, self.h.rng
        o = self.opts
        week = r.uniform(0, 9)
        key = self.topic["key"]
        adopted = None
        if not self.shape.endswith("-only"):
            adopted = h.schedule(week, key, lambda s: self.adopt(s, o[0], o[1]))
        if self.shape in ("switch", "chain"):
            float_week = week + r.uniform(3, 7)
            floated = h.schedule(float_week, key, lambda s: self.float(s, o[0], o[1]), after=adopted)
            switch_week = float_week + r.uniform(1, 4)
            switched = h.schedule(switch_week, key, lambda s: self.switch(s, o[0], o[1]), after=floated)
            if self.shape == "chain" and len(o) > 2:
                h.schedule(switch_week + r.uniform(4, 8), key, lambda s: self.switch(s, o[1], o[2]), after=switched)
            elif len(o) > 2 and r.random() < 0.6:
                h.schedule(r.uniform(week + 1, switch_week + 6), key, lambda s: self.reject(s, o[2]), after=adopted)
        if self.shape.startswith("proposed"):
            at = week + r.uniform(4, 12)
            proposed = h.schedule(at, key, lambda s: self.propose(s, o[1]), after=adopted)
            if r.random() < 0.5:
                h.schedule(at + r.uniform(1, 4), key, lambda s: self.pending(s, o[1]), after=proposed)
        if self.shape.startswith("rejected"):
            h.schedule(week + r.uniform(2, 12), key, lambda s: self.reject(s, o[1]), after=adopted)

    # ---- moments --------------------------------------------------------------------------

    def say(self, s: Session, template_list: list[str], values: dict[str, str], who: str = "user") -> str:
        """One turn from a randomly worded template (those naming a file only where the topic has one)."""
        fits = [t for t in template_list if values["path"] or "{path}" not in t]
        text = self.h.project.fill(self.h.rng.choice(fits), **values)
        if who == "user":
            return s.user(text, self.h.rng.choice(self.h.project.people))
        return s.assistant(text)

    def adopt(self, s: Session, a: dict, b: dict) -> None:
        v = self.v(A=a, B=b)
        self.say(s, P.ADOPT["open"], v)
        self.say(s, P.ADOPT["compare"], v, "assistant")
        if self.h.rng.random() < 0.8:
            self.say(s, P.ADOPT["ask_detail"], v)
            self.detail[a["name"]] = self.say(s, P.ADOPT["detail"], v, "assistant")
        self.say(s, P.ADOPT["decide"], v)
        self.say(s, P.ADOPT["confirm"], v, "assistant")
        self.record(s, a, v, P.ADOPT, "accepted", None)
        self.current = a

    def float(self, s: Session, a: dict, b: dict) -> None:
        v = self.v(A=a, B=b)
        self.say(s, P.FLOAT["open"], v)
        self.say(s, P.FLOAT["answer"], v, "assistant")
        self.say(s, P.FLOAT["close"], v)

    def switch(self, s: Session, a: dict, b: dict) -> None:
        v = self.v(B=b, A=a)
        self.say(s, P.SWITCH["open"], v)
        self.detail[b["name"]] = self.say(s, P.SWITCH["answer"], v, "assistant")
        self.say(s, P.SWITCH["why"], v)
        self.say(s, P.SWITCH["confirm"], v, "assistant")
        self.record(s, b, v, P.SWITCH, "accepted", self.dec.get(a["name"]))
        self.current = b

    def reject(self, s: Session, c: dict) -> None:
        v = self.v(C=c)
        self.say(s, P.REJECT["open"], v)
        self.say(s, P.REJECT["answer"], v, "assistant")
        self.say(s, P.REJECT["close"], v)
        self.record(s, c, v, P.REJECT, "rejected", None)

    def propose(self, s: Session, d: dict) -> None:
        v = self.v(D=d)
        self.say(s, P.PROPOSE["open"], v)
        self.say(s, P.PROPOSE["answer"], v, "assistant")
        self.record(s, d, v, P.PROPOSE, "proposed", None)

    def pending(self, s: Session, d: dict) -> None:
        v = self.v(D=d)
        self.say(s, P.PROPOSE["followup"], v)
        self.say(s, P.PROPOSE["pending"], v, "assistant")

    def record(self, s: Session, option: dict, v: dict, phr: dict, status: str, supersedes: str | None) -> None:
        h = self.h
        title = h.project.fill(h.rng.choice(phr["title"]), **v)
        ref = s.decision(title, h.project.fill(h.rng.choice(phr["text"]), **v), status, supersedes)
        self.dec[option["name"]] = ref
        self.when[option["name"]] = s.now
        if status != "rejected" and h.rng.random() < 0.35:  # an ADR file, whose status line goes stale
            n = self.adr_number()
            slug = "-".join(title.lower().replace(":", "").replace("(", "").replace(")", "").split())[:48]
            adr = (f"# {n}. {title}\n\n## Status\n{cap(status)}\n\n## Context\n"
                   f"{cap(v['purpose'])} needs a settled choice.\n\n## Decision\n{h.items[-1]['text']}\n\n"
                   f"## Consequences\n{cap(option['cons'][0])}.")
            s.note(f"docs/adr/{n:04d}-{slug}.md", adr)

    # ---- questions ------------------------------------------------------------------------

    def questions(self) -> None:
        h, r, p = self.h, self.h.rng, self.h.project
        accepted = [o for o in self.opts if o["name"] in self.dec and h.items_by_ref[self.dec[o["name"]]]["status"] == "accepted"]
        chain = sorted(accepted, key=lambda o: self.when[o["name"]])
        if chain:
            last, first = chain[-1], chain[0]
            v = self.v(A=last)
            ref = self.dec[last["name"]]
            answer = f"{last['name']} ({version(last, p.stack)})"
            h.ask("single", p.fill(r.choice(self.topic["asks"]), **v), [ref], h.after(ref), answer)
            if r.random() < 0.7:
                h.ask("status", p.fill(r.choice(h.phrases["status_yes"]), **v), [ref], h.after(ref), "yes, accepted")
            text = paraphrase(h, self.topic["paraphrases"], [ref], v)
            if text:
                h.ask("paraphrase", text, [ref], h.after(ref), answer)
            detail = self.detail.get(last["name"])
            if detail and r.random() < 0.8:
                h.ask("single", p.fill(last["detail"][1]), [detail], h.after(detail), p.fill(last["detail"][0]))
            t0 = self.when[first["name"]]
            if t0 - p.start > timedelta(days=10) and r.random() < 0.5:
                h.ask("unanswerable", p.fill(r.choice(self.topic["asks"]), **v), [],
                      p.start + (t0 - p.start) * r.uniform(0.3, 0.9), "nothing decided yet at that time")
        for older, newer in zip(chain, chain[1:]):
            v = self.v(A=older, B=newer)
            old, new = self.dec[older["name"]], self.dec[newer["name"]]
            h.ask("multi", p.fill(r.choice(h.phrases["switch_why"]), **v), [old, new], h.after(new),
                  f"{older['name']} was replaced by {newer['name']}")
            h.ask("status", p.fill(r.choice(h.phrases["status_still"]), **v), [old, new], h.after(new),
                  f"no, {newer['name']} replaced it")
            h.ask("temporal", p.fill(r.choice(self.topic["asks"]), **v), [old],
                  h.after(old, h.times[new]), f"{older['name']} at that time")
            mid = h.times[old] + (h.times[new] - h.times[old]) * r.uniform(0.2, 0.8)
            if mid.month != h.times[new].month:
                h.ask("temporal", p.fill(r.choice(h.phrases["period"]), month=P.MONTHS[mid.month - 1], **v), [old],
                      h.after(new), f"{older['name']}")
        if len(chain) > 2:
            h.ask("multi", p.fill(h.phrases["chain"][0], **self.base), [self.dec[o["name"]] for o in chain],
                  h.after(self.dec[chain[-1]["name"]]), " then ".join(o["name"] for o in chain))
        for o in self.opts:
            ref = self.dec.get(o["name"])
            status = h.items_by_ref[ref]["status"] if ref else None
            if status in ("proposed", "rejected"):
                v = self.v(D=o, C=o)
                h.ask("unanswerable", p.fill(r.choice(h.phrases[status]), **v), [ref], h.after(ref),
                      f"no: {o['name']} was only {status}")
                if not chain:  # nothing was ever accepted: "which X do we use" has no answer either
                    h.ask("unanswerable", p.fill(r.choice(self.topic["asks"]), **v), [ref], h.after(ref),
                          f"no confirmed decision; {o['name']} was only {status}")


def bug_story(h: History, bug: dict, pr: int) -> Callable[[], None]:
    """A bug reported, its cause found (the same session or a later one), its fix shipped."""
    p, r = h.project, h.rng
    path = h.area_path(bug["area"])
    values = {"file": path, "pr": pr, "title": bug["title"], "rid": f"{r.getrandbits(40):010x}"}
    refs: dict[str, str] = {}
    week = r.uniform(1, 22)

    def report(s: Session) -> None:
        refs["report"] = s.user(p.fill(bug["report"], **values), r.choice(p.people))
        s.assistant(p.fill(r.choice(P.BUG["ack"]), **values))
        s.user(p.fill(r.choice(P.BUG["more"]), **values))
        if r.random() < 0.5:
            refs["cause"] = s.assistant(r.choice(P.BUG["cause_intro"]) + p.fill(bug["cause"], **values))

    def cause(s: Session) -> None:
        if "cause" not in refs:
            s.user(p.fill(r.choice(P.BUG["fix_open"]), **values))
            refs["cause"] = s.assistant(r.choice(P.BUG["cause_intro"]) + p.fill(bug["cause"], **values))

    def fix(s: Session) -> None:
        s.user(p.fill(r.choice(P.BUG["fix_open"]), **values))
        refs["fix"] = s.assistant(p.fill(bug["fix"], **values))
        s.user(r.choice(P.BUG["thanks"]))

    reported = h.schedule(week, bug["key"], report)
    found = h.schedule(week + r.uniform(0.3, 1.0), bug["key"], cause, after=reported)
    h.schedule(week + r.uniform(1.2, 2.5), bug["key"], fix, after=found)

    def questions() -> None:
        fix_answer = p.fill(bug["fix"], **values)
        kinds = r.sample(["multi", "why", "fix", "paraphrase", "open"], 3)
        if "multi" in kinds:
            h.ask("multi", p.fill(r.choice(h.phrases["bug_multi"]), **values), [refs["cause"], refs["fix"]],
                  h.after(refs["fix"]), fix_answer)
        if "why" in kinds:
            h.ask("single", p.fill(bug["asks"][0], **values), [refs["cause"]], h.after(refs["fix"]), bug["cause"])
        if "fix" in kinds:
            h.ask("single", p.fill(bug["asks"][1], **values), [refs["fix"]], h.after(refs["fix"]), fix_answer)
        if "paraphrase" in kinds:
            text = paraphrase(h, bug["paraphrases"], [refs["cause"], refs["fix"]], values)
            if text:
                h.ask("paraphrase", text, [refs["cause"], refs["fix"]], h.after(refs["fix"]), fix_answer)
        if "open" in kinds:
            h.ask("temporal", p.fill(r.choice(h.phrases["bug_open"]), **values), [refs["report"]],
                  h.after(refs["report"], h.times[refs["cause"]]), "not yet; it was reported and is being looked at")
    return questions


def fact_story(h: History, fact: dict, revise: bool) -> Callable[[], None]:
    p, r = h.project, h.rng
    values = fact["values"].get(p.stack) or fact["values"]["any"]
    first, second = r.sample(values, 2) if revise and len(values) > 1 else (r.choice(values), None)
    refs: dict[str, str] = {}
    week = r.uniform(0, 14)

    def say(s: Session) -> None:
        text = p.fill(r.choice(fact["say"]), v=p.fill(first))
        refs["say"] = s.user(text, r.choice(p.people)) if r.random() < 0.7 else s.assistant(text)

    def change(s: Session) -> None:
        refs["revise"] = s.user(p.fill(r.choice(fact["revise"]), v=p.fill(second), old=p.fill(first)), r.choice(p.people))

    told = h.schedule(week, fact["key"], say, insert=True)
    if second:
        h.schedule(week + r.uniform(4, 10), fact["key"], change, insert=True, after=told)

    def questions() -> None:
        latest = refs.get("revise", refs["say"])
        answer = p.fill(second or first)
        h.ask("single", r.choice(fact["asks"]), [latest], h.after(latest), answer)
        text = paraphrase(h, fact["paraphrases"], [latest], {})
        if text and r.random() < 0.7:
            h.ask("paraphrase", text, [latest], h.after(latest), answer)
        if second:
            h.ask("temporal", r.choice(fact["asks"]), [refs["say"]], h.after(refs["say"], h.times[latest]), p.fill(first))
            if r.random() < 0.5:
                h.ask("multi", r.choice(h.phrases["fact_change"]).format(ask=r.choice(fact["asks"])), [refs["say"], latest],
                      h.after(latest), f"{p.fill(first)}, then {answer}")
    return questions


def distractor(h: History, dialogue: list[tuple[str, str]], project: Project | None = None
               ) -> Callable[[Session], None]:
    """A conversation written as is, or (with `project`) filled with the project's names and files."""
    def write(s: Session) -> None:
        for role, text in dialogue:
            if project is not None:
                text = project.fill(re.sub(r"\{path:(\w+)\}", lambda m: h.area_path(m.group(1)), text))
            if role == "user":
                s.user(text, h.rng.choice(h.project.people))
            else:
                s.assistant(text)
    return write

