"""`agentmemrec hook claude-code`: one Claude Code hook event on stdin, the hook's JSON on stdout.

Claude Code runs it on every `SessionStart` and `UserPromptSubmit` event and adds what it prints
(`hookSpecificOutput.additionalContext`) to the model's context. So it must be quick and must
never break a prompt:

- it imports only the standard library (tests run it and look at `sys.modules`) and asks the
  process that owns the store, which has the models and indexes loaded, over its socket;
- past `--deadline` seconds, on any error, and when no owner runs (it then starts one, detached,
  logging to `HOME/owner.log`) it prints nothing and exits 0; every event leaves one line in
  `HOME/hook.log`, naming the event once read (what was added, or why nothing: never the prompt's
  text), never on stdout;
- a `SessionStart`, once a session, has `--start-deadline` seconds instead and waits for an owner
  that is starting (one it started, or another process did), so that a session started when no
  process had the store open (the first of the day) still gets its decisions in force;
- stdout carries the hook JSON and nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable, NoReturn

from agentmemrec.server.owner_socket import HOME_ENV, STORE_ENV, NoOwner, ask, default_home

EVENTS = ("SessionStart", "UserPromptSubmit")
EVENT_FIELDS = ("hook_event_name", "cwd", "prompt", "source", "session_id")
PROMPT_BUDGET, DIGEST_BUDGET = 1200, 800
MAX_HOOK_BUDGET = 2000  # 8,000 to 12,000 characters, by the text (hook_context.within_reach keeps it in reach)
MAX_CONTEXT_CHARS = 10_000  # Claude Code passes on this much whole; longer, a preview and a file path
MAX_EVENT_BYTES = 1 << 20
DEADLINE_S = 2.0
START_DEADLINE_S = 4.0  # a SessionStart's: time for an owner to open the store and load its models
POLL_S = 0.1  # how often a SessionStart asks again while an owner starts
OWNER_IDLE_EXIT_S = 3600  # an owner the hook started leaves after an hour without a call
STARTING_S = 60  # an owner started this recently may still be opening the store: do not start another
LOG_BYTES = 1 << 20  # hook.log is rotated to hook.log.1 past this, owner.log (the owner's --log-file) too


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("client", choices=["claude-code"], help="whose hook event arrives on stdin")
    p.add_argument("--project", default=None,
                   help="the project to use (default: the one the event's cwd maps to, as for "
                        "transcripts: --project-map, else the git repository's name)")
    p.add_argument("--project-map", type=Path, default=None,
                   help="JSON or TOML file mapping cwd prefixes to projects")
    p.add_argument("--budget", type=_budget, default=PROMPT_BUDGET,
                   help=f"tokens of the slate added to a prompt (default {PROMPT_BUDGET}, at most "
                        f"{MAX_HOOK_BUDGET})")
    p.add_argument("--digest-budget", type=_budget, default=DIGEST_BUDGET,
                   help=f"tokens of the decisions digest added at session start (default {DIGEST_BUDGET})")
    p.add_argument("--deadline", type=_seconds, default=DEADLINE_S,
                   help=f"seconds after which the hook gives up and adds nothing (default {DEADLINE_S})")
    p.add_argument("--start-deadline", type=_seconds, default=START_DEADLINE_S,
                   help="the same for a SessionStart, which waits for an owner that is starting (default "
                        f"{START_DEADLINE_S}; below the client's hook timeout)")


def _budget(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 200 <= value <= MAX_HOOK_BUDGET:
        raise argparse.ArgumentTypeError(f"use 200 to {MAX_HOOK_BUDGET} tokens, not {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 60:  # also false for nan
        raise argparse.ArgumentTypeError(f"use a number of seconds above 0, at most 60, not {text!r}")
    return value


class HookParser(argparse.ArgumentParser):
    """A hook's bad option must not break the prompt: Claude Code reads exit code 2 as "block this
    prompt". The error goes to hook.log and stderr, and the hook exits 0 adding nothing."""

    def error(self, message: str) -> NoReturn:
        text = f"{self.prog}: {message}; the hook adds nothing until its command is fixed (see `setup`)"
        log(default_home(), text)
        sys.stderr.write(text + "\n")
        raise SystemExit(0)


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    """The `hook` command in the full command line (which only `--help` reaches: `main` in
    `cli/__init__.py` sends `agentmemrec hook ...` here before importing anything heavy)."""
    add_arguments(sub.add_parser("hook", help="answer a Claude Code hook event (stdin) with "
                                              "context from memory (stdout); see `setup`"))
    return {"hook": run}


def main(argv: list[str]) -> int:
    parser = HookParser(prog="agentmemrec hook", description="Answer a Claude Code "
                                     "hook event on stdin with context from memory on stdout.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    home = default_home()
    if os.environ.get(STORE_ENV):  # every process opens a PostgreSQL store itself: no owner to ask
        log(home, f"{STORE_ENV} names a PostgreSQL store: use serve --http and its http hook instead")
        return 0
    name = None  # the event's, once read: each line names it, as respond's own lines do

    def line(why: str) -> str:
        return f"{name}: {why}" if name else why

    limit = max(args.deadline, args.start_deadline)  # until the event says which it is
    signal.signal(signal.SIGALRM, lambda *_: _give_up(home, line(f"no answer within {limit} s")))
    signal.setitimer(signal.ITIMER_REAL, limit)
    started = time.monotonic()
    try:
        event = json.loads(sys.stdin.buffer.read(MAX_EVENT_BYTES) or b"null")
        name = event_name(event)
        limit = args.start_deadline if name == "SessionStart" else args.deadline
        signal.setitimer(signal.ITIMER_REAL, max(limit - (time.monotonic() - started), 0.001))
        out = respond(args, home, event, started + limit)
    except TimeoutError:  # the socket's own timeout, at the same deadline as the alarm
        log(home, line(f"no answer within {limit} s"))
        out = ""
    except Exception as exc:  # noqa: BLE001 - nothing may reach the prompt but the hook JSON
        log(home, line(f"{type(exc).__name__}: {exc}"))
        out = ""
    signal.setitimer(signal.ITIMER_REAL, 0)
    if out:
        os.write(sys.stdout.fileno(), out.encode())
    return 0


def _give_up(home: Path, why: str) -> None:
    log(home, why)
    os._exit(0)  # from the signal handler: nothing has been printed


def event_name(event: Any) -> str | None:
    """The event's name, if it is one the hook answers."""
    name = event.get("hook_event_name") if isinstance(event, dict) else None
    return name if name in EVENTS else None


def respond(args: argparse.Namespace, home: Path, event: Any, deadline: float) -> str:
    """The hook JSON for one event (parsed JSON), or "" for none, by `deadline` (monotonic); either
    way one line in hook.log says what was done and why (the prompt's text is never logged)."""
    name = event_name(event)
    if name is None:
        what = (f"event {ascii(event.get('hook_event_name'))[:80]}" if isinstance(event, dict)
                else "an event that is not a JSON object")
        log(home, f"{what}: nothing added (the hook answers {' and '.join(EVENTS)} events)")
        return ""
    options = {"project": args.project, "budget": args.budget, "digest_budget": args.digest_budget,
               "project_map": str(args.project_map.expanduser().resolve()) if args.project_map else None}
    fields = {k: event[k] for k in EVENT_FIELDS if isinstance(event.get(k), str)}
    try:
        reply = ask(home, "hook", [fields, options], max(deadline - time.monotonic(), 0.01))
    except NoOwner:
        why = start_owner(home)
        reply = wait_for_owner(home, fields, options, deadline) if name == "SessionStart" else None
        if reply is None:
            log(home, f"{name}: nothing added ({why})")
            return ""
    context = reply.get("context") or ""
    where = f"{name} in project {reply.get('project')}"
    if not context:  # the reason, for whoever wonders why a prompt got no memory
        log(home, f"{where}: nothing added ({reply.get('why')})")
        return ""
    log(home, f"{where}: added {len(context)} characters")
    return hook_output(name, context)


def wait_for_owner(home: Path, fields: dict[str, str], options: dict[str, Any], deadline: float) -> Any:
    """The owner's reply once one answers, asking every POLL_S until `deadline`; None if none does."""
    while (left := deadline - time.monotonic()) > POLL_S:
        time.sleep(POLL_S)
        try:
            return ask(home, "hook", [fields, options], left - POLL_S)
        except NoOwner:
            continue
    return None


def hook_output(event_name: str, context: str) -> str:
    return json.dumps({"hookSpecificOutput": {"hookEventName": event_name, "additionalContext": context}})


def start_owner(home: Path) -> str:
    """Start `agentmemrec owner` in its own session, so the next event finds the store open; it
    leaves by itself after an hour without a call. It logs to HOME/owner.log, moved to owner.log.1
    here as it starts, and by the owner itself past LOG_BYTES (a busy one lives for days).
    Returns what happened, for the hook's log line."""
    import subprocess  # noqa: PLC0415 - only on the path that needs it

    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    marker = home / "owner.starting"
    try:
        since = time.time() - marker.stat().st_mtime
        if since < STARTING_S:
            return (f"the store's owner, started {since:.0f} s ago, is not answering yet; if this lasts, "
                    f"see {home / 'owner.log'}")
    except FileNotFoundError:
        pass
    marker.touch()
    path = home / "owner.log"
    if path.exists():
        path.replace(home / "owner.log.1")
    with open(path, "ab") as errors:
        # stderr is the file too: what fails before the owner opens its log (an import) is kept
        subprocess.Popen([sys.executable, "-m", "agentmemrec.server.cli", "owner", "--idle-exit",
                          str(OWNER_IDLE_EXIT_S), "--log-file", str(path.absolute())], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=errors, start_new_session=True,
                         env={**os.environ, HOME_ENV: str(home)})
    return f"no process owned the store: started one for the next prompt, logging to {path}"


def log(home: Path, message: str) -> None:
    """One line in HOME/hook.log, the hook's only output besides its JSON."""
    try:
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = home / "hook.log"
        if path.exists() and path.stat().st_size > LOG_BYTES:
            path.replace(home / "hook.log.1")
        with path.open("a", encoding="utf-8") as fh:
            fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} hook: {message}\n")
    except OSError:
        pass  # a hook that cannot log still must not fail the prompt
