"""`agentmemrec setup`: the MCP server entry (and, for Claude Code, the hooks and the transcript
capture) merged into a client's own configuration files.

Each client keeps JSON files that hold other servers, hooks and its own state, so a change is a
merge of our entries only: running it again changes nothing, `--remove` takes out exactly what
it added, the file as it was is kept beside it (`FILE.agentmemrec.bak`) before any change, and
`--dry-run` prints the diff instead of writing. Where each client looks:

- Claude Code: the server in `~/.claude.json` under the repository's folder (the "local" scope
  `claude mcp add` writes), the hooks in the repository's `.claude/settings.local.json` (private
  to you, not committed);
- Cursor: the repository's `.cursor/mcp.json` and a project rule, `.cursor/rules/agentmemrec.mdc`,
  that puts the server's instructions in every request (both kept out of git like Claude Code's
  settings);
- Claude Desktop: `claude_desktop_config.json` in `~/Library/Application Support/Claude` (macOS),
  `%APPDATA%\\Claude` (Windows) or `~/.config/Claude` (Linux builds).

Whatever the client, setup also records the folder and project in AgentMemRec's home
(`setups.json`), so a second repository of the same name is seen wherever the first was set up.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Mapping

from agentmemrec.indexing.errors import InputError
from agentmemrec.indexing.sources.transcripts import main_worktree
from agentmemrec.server.owner_socket import private_home

Client = Literal["claude-code", "cursor", "claude-desktop"]
CLIENTS: tuple[str, ...] = ("claude-code", "cursor", "claude-desktop")
NAME = "agentmemrec"  # the server's name in every client's configuration
RECORD = "setups.json"  # in the home: repository folder -> client -> project, for `project_elsewhere`
HOOK_EVENTS = ("SessionStart", "UserPromptSubmit")
HOOK_TIMEOUT_S = 5  # Claude Code's own limit, behind the hook's deadlines (2 s, a SessionStart's 4 s)
RESTART = {"claude-code": "start a new Claude Code session in the repository",
           "cursor": "reload the Cursor window (or enable agentmemrec under Settings > MCP)",
           "claude-desktop": "quit and restart Claude Desktop"}


RULE = ".cursor/rules/agentmemrec.mdc"  # Cursor's project rule, applied to every request
RULE_MARK = "<!-- written by `agentmemrec setup cursor`; `agentmemrec setup cursor --remove` deletes it -->"


def instructions(hooked: bool, captured: bool) -> str:
    """What the model is told at initialize (and, in Cursor, by the rule setup writes), by what the
    server does on its own: with Claude Code's sessions `captured`, turns are stored already;
    where hooks may answer (`hooked`: Claude Code, HTTP), a slate may already be in context."""
    return " ".join(filter(None, [
        "Long-term memory for this project. Call recall_slate at the start of a task and whenever earlier "
        "decisions, conversations or notes may matter; it returns a compact, token-budgeted slate of evidence.",
        "A slate for the prompt may already be in context (a block starting 'AgentMemRec:'): then recall only "
        "for what it does not cover." if hooked else "",
        "Conversation turns are stored as they happen: call remember for decisions (with status), facts and "
        "file notes worth keeping." if captured else
        "Call remember to store turns, decisions (with status) and file notes worth keeping.",
        "Call explain_selection when a slate seems to miss something; list_projects, decisions_in_force and "
        "show_unit show what memory holds."]))


def cursor_rule(project: str) -> str:
    """Cursor's rule: the server's instructions in every request, whatever Cursor does with the
    ones the server gives at initialize (its hooks cannot add a slate to a prompt)."""
    return ("---\ndescription: AgentMemRec, this repository's long-term memory (MCP server agentmemrec)\n"
            f"alwaysApply: true\n---\n{RULE_MARK}\n\n{instructions(hooked=False, captured=False)} "
            f"This repository's memory is project {project}.\n")


@dataclass(frozen=True)
class Target:
    """Where a client is configured: its user folder (`~`), the repository, the project."""

    client: Client
    user_dir: Path
    repo: Path
    project: str
    platform: str = sys.platform
    env: tuple[tuple[str, str], ...] = ()  # AGENTMEMREC_HOME, when set, travels with the entries
    watch: bool = True  # the server keeps the repository's notes and ADRs in memory
    # where the repository's sessions are mapped to `project` when that is not the repository's
    # own name (captured sessions are named by their repository otherwise)
    project_map: Path | None = None
    # `--user-dir`: every user file is under `user_dir`, whatever XDG_CONFIG_HOME or APPDATA say
    user_dir_given: bool = False
    record: Path | None = None  # the home's record of setups (`RECORD`); None: none is kept


@dataclass(frozen=True)
class Change:
    path: Path
    before: str | None  # None: the file does not exist
    after: str | None  # None: it still does not
    note: str = ""  # what setup left to the user about this file
    private: bool = False  # a file of the home's: this user's alone, as the home is

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        return "".join(difflib.unified_diff((self.before or "").splitlines(True), (self.after or "").splitlines(True),
                                            f"{self.path} (now)", f"{self.path} (after setup)"))


def command_line() -> list[str]:
    """How a client starts this installation: its console script, else `python -m`."""
    script = Path(sys.executable).with_name("agentmemrec")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "agentmemrec.server.cli"]


def desktop_config(user_dir: Path, platform: str, env: Mapping[str, str] | None = None) -> Path:
    """Claude Desktop's configuration file: under `user_dir`, or where `env` (default: this
    process's environment, as it is now) relocates it."""
    env = os.environ if env is None else env
    if platform == "darwin":
        base = user_dir / "Library" / "Application Support"
    elif platform.startswith("win"):
        base = Path(env["APPDATA"]) if env.get("APPDATA") else user_dir / "AppData" / "Roaming"
    else:
        base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else user_dir / ".config"
    return base / "Claude" / "claude_desktop_config.json"


def server_entry(target: Target) -> dict[str, Any]:
    command, *args = command_line()
    args += ["serve", "--project", target.project]
    if target.client == "claude-code":
        args.append("--capture-claude-code")  # its sessions become memory as they are written
        if target.project_map is not None:
            args += ["--project-map", str(target.project_map)]
    if target.watch and target.client != "claude-desktop":  # a per-repository server
        args += ["--watch", str(target.repo)]  # its notes and ADRs, as they change
    entry: dict[str, Any] = {"type": "stdio"} if target.client == "claude-code" else {}
    entry.update({"command": command, "args": args})
    if target.env:
        entry["env"] = dict(target.env)
    return entry


def hook_command(target: Target) -> str:
    words = [*command_line(), "hook", "claude-code", "--project", target.project]
    prefix = "".join(f"{k}={shlex.quote(v)} " for k, v in target.env)
    return prefix + " ".join(shlex.quote(w) for w in words)


def is_ours(hook: Any) -> bool:
    return isinstance(hook, dict) and " hook claude-code" in str(hook.get("command", "")) \
        and "agentmemrec" in str(hook.get("command", ""))


def changes(target: Target, remove: bool = False) -> list[Change]:
    """What setup (or `remove`) would write, file by file; nothing is written here. The record
    comes first: a setup that stops half-way leaves a repository recorded but not set up (a
    refusal `--project` gets past), not set up unseen (a memory shared without a word)."""
    record = [] if target.record is None else [_edit(target.record, lambda doc: _record(doc, target, remove),
                                                     private=True)]
    return [*record, *_client_changes(target, remove)]


def _client_changes(target: Target, remove: bool) -> list[Change]:
    entry = None if remove else server_entry(target)
    if target.client == "claude-code":
        settings = None if remove else hook_command(target)
        return [_edit(target.user_dir / ".claude.json",
                      lambda doc: _set_server(_folder(doc, target.repo, entry is not None), entry, drop_empty=True)),
                _edit(target.repo / ".claude" / "settings.local.json", lambda doc: _set_hooks(doc, settings)),
                *([] if remove else _excluded(target.repo, PRIVATE["claude-code"])),
                *([] if target.project_map is None else [_edit(target.project_map, lambda doc: _map_repo(
                    doc, target.repo, None if remove else target.project), private=True)])]
    if target.client == "cursor":
        return [_edit(target.repo / ".cursor" / "mcp.json", lambda doc: _set_server(doc, entry)),
                _rule(target.repo / RULE, None if remove else cursor_rule(target.project)),
                *([] if remove else _excluded(target.repo, PRIVATE["cursor"]))]
    path = desktop_config(target.user_dir, target.platform, {} if target.user_dir_given else None)
    return [_edit(path, lambda doc: _set_server(doc, entry))]


def project_elsewhere(target: Target) -> Path | None:
    """Another repository set up for `target.project`, by the home's record (any client) or, for
    setups made before the record, Claude Code's `~/.claude.json`: two repositories named alike
    would share one memory. A linked worktree of the same repository is the same repository; a
    folder that is no longer a repository is left out. A record that cannot be read is passed
    over here: `changes` refuses it, naming the file."""
    recorded = _json_object(target.record) if target.record is not None else {}
    folders = [f for f, clients in recorded.items() if isinstance(clients, dict) and target.project in clients.values()]
    projects = _json_object(target.user_dir / ".claude.json").get("projects")
    for folder, part in projects.items() if isinstance(projects, dict) else ():
        servers = part.get("mcpServers") if isinstance(part, dict) else None
        entry = servers.get(NAME) if isinstance(servers, dict) else None
        args = entry.get("args") if isinstance(entry, dict) else None
        if isinstance(args, list) and ["--project", target.project] in (args[i:i + 2] for i in range(len(args))):
            folders.append(folder)
    mine = main_worktree(target.repo)
    return next((Path(f) for f in folders if (Path(f) / ".git").exists() and main_worktree(Path(f)) != mine), None)


def _json_object(path: Path) -> dict[str, Any]:
    """The JSON object in a file; {} when there is none, or it is broken (setup's edit says so)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _record(doc: dict[str, Any], target: Target, remove: bool) -> None:
    """The record's entry for the folder and client: set to the project, or taken out (with the
    folder once no client is left). Claude Desktop has one server for every conversation, so its
    setup (or removal) in one folder replaces (or drops) the one recorded for any other."""
    for folder in list(doc) if target.client == "claude-desktop" else [str(target.repo)]:
        clients = doc.pop(folder, None)
        kept = {c: p for c, p in clients.items() if c != target.client} if isinstance(clients, dict) else {}
        if kept:
            doc[folder] = kept
    if not remove:
        doc.setdefault(str(target.repo), {})[target.client] = target.project


# The files setup writes into a repository are this machine's: absolute paths to its install, and
# Cursor's rule naming tools a teammate without agentmemrec lacks; kept out of git (as Claude Code
# does for settings.local.json), with setup's backups beside them
PRIVATE = {"claude-code": (".claude/settings.local.json", ".claude/*.agentmemrec.bak"),
           "cursor": (".cursor/mcp.json", ".cursor/*.agentmemrec.bak", RULE, ".cursor/rules/*.agentmemrec.bak")}


def tracked(repo: Path, name: str) -> bool:
    """Whether git tracks the file (then an exclude line would not hide its changes)."""
    try:
        return subprocess.run(["git", "-C", str(repo), "ls-files", "--error-unmatch", "--", name],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):  # no git here: an exclude line does no harm
        return False


def _excluded(repo: Path, private: tuple[str, ...]) -> list[Change]:
    """The repository's own exclude file (`.git/info/exclude`, never committed) with the private
    files added, if a line of it does not already name them; nothing outside a git repository. A
    file git already tracks is left to the user, with a note."""
    if not (repo / ".git").is_dir():
        return []
    path = repo / ".git" / "info" / "exclude"
    try:
        before = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        before = None
    shared = [p for p in private if "*" not in p and tracked(repo, p)]
    note = "".join(f"{p} is tracked by git, so it is not excluded: it now holds this machine's paths to "
                   "agentmemrec; commit that change only if everyone's install is there" for p in shared)
    lines = (before or "").splitlines()
    missing = [p for p in private if p not in shared and p not in lines and f"/{p}" not in lines]
    if not missing:
        return [Change(path, before, before, note)]
    head = (before or "") + ("\n" if before and not before.endswith("\n") else "")
    return [Change(path, before, head + "# agentmemrec setup: this machine's own files\n"
                   + "".join(f"{p}\n" for p in missing), note)]


def apply(change: Change) -> Path | None:
    """Write one change, keeping the file as it was beside it; returns the backup's path. A file
    setup wrote whole and `--remove` takes out (Cursor's rule) is deleted, with no backup."""
    if change.after is None:
        change.path.unlink()
        return None
    backup = None
    if change.private:
        private_home(change.path.parent)  # made 0700, or refused if another user could write in it
    else:
        change.path.parent.mkdir(parents=True, exist_ok=True)
    if change.before is not None:
        backup = change.path.with_name(change.path.name + ".agentmemrec.bak")
        shutil.copy2(change.path, backup)
        if change.private:
            os.chmod(backup, 0o600)
    tmp = change.path.with_name(change.path.name + ".agentmemrec.tmp")
    tmp.write_text(change.after, encoding="utf-8")
    if change.private:
        os.chmod(tmp, 0o600)
    elif change.before is not None:
        shutil.copymode(change.path, tmp)
    os.replace(tmp, change.path)  # a client reading the file sees the old or the new, never half
    return backup


def _edit(path: Path, edit: Callable[[dict[str, Any]], None], private: bool = False) -> Change:
    try:
        before = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        before = None
    try:
        doc = json.loads(before) if before and before.strip() else {}
    except json.JSONDecodeError as exc:
        raise InputError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg}); fix it or move "
                         "it aside, then run setup again (nothing was written)") from exc
    if not isinstance(doc, dict):
        raise InputError(f"{path} does not hold a JSON object; fix it or move it aside (nothing was written)")
    after = copy.deepcopy(doc)
    edit(after)
    if after == doc:
        return Change(path, before, before, private=private)
    return Change(path, before, json.dumps(after, indent=2, ensure_ascii=False) + "\n", private=private)


def _rule(path: Path, text: str | None) -> Change:
    """A file that is ours whole: written as `text`, or (None) deleted while it carries our mark;
    one whose mark was taken out is someone's own now, and is left."""
    try:
        before = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        before = None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not UTF-8 text; move it aside, then run setup again (nothing was written)") from exc
    if text is None and before is not None and RULE_MARK not in before:
        return Change(path, before, before, f"{path} no longer carries setup's mark, so it was left as it is; "
                                            "delete it if agentmemrec's instructions in it are not wanted")
    return Change(path, before, text)


def _map_repo(doc: dict[str, Any], repo: Path, project: str | None) -> None:
    """The project map's entry for the repository (`--project-map`: cwd prefix -> project)."""
    if project is None:
        doc.pop(str(repo), None)
    else:
        doc[str(repo)] = project


def _folder(doc: dict[str, Any], repo: Path, create: bool) -> dict[str, Any]:
    """A repository's own part of `~/.claude.json` (`projects` keyed by its folder)."""
    projects = doc.setdefault("projects", {}) if create else doc.get("projects", {})
    if not isinstance(projects, dict):
        raise InputError("~/.claude.json: 'projects' is not an object; fix it (nothing was written)")
    return projects.setdefault(str(repo), {}) if create else projects.get(str(repo), {})


def _set_server(doc: dict[str, Any], entry: dict[str, Any] | None, drop_empty: bool = False) -> None:
    """Our server entry set, or taken out (`None`); with `drop_empty`, an `mcpServers` that held
    only ours goes with it (a repository's part of `~/.claude.json`, which setup made)."""
    servers = doc.get("mcpServers")
    if entry is None:
        if isinstance(servers, dict) and servers.pop(NAME, None) is not None and drop_empty and not servers:
            doc.pop("mcpServers")
        return
    if not isinstance(servers, dict):
        servers = doc["mcpServers"] = {}
    servers[NAME] = entry


def _set_hooks(doc: dict[str, Any], command: str | None) -> None:
    """Our hook on each event: replaced where it is, else added as a group of its own; `None`
    takes it out, with the groups and events that held only it. Other entries stay as they are."""
    hooks = doc.get("hooks")
    if hooks is None and command is None:
        return
    if hooks is None:
        hooks = doc["hooks"] = {}
    if not isinstance(hooks, dict):
        raise InputError("settings: 'hooks' is not an object; fix it (nothing was written)")
    ours = {"type": "command", "command": command, "timeout": HOOK_TIMEOUT_S} if command else None
    for event in HOOK_EVENTS:
        groups = hooks.get(event, [])
        if not isinstance(groups, list):
            raise InputError(f"settings: hooks.{event} is not a list; fix it (nothing was written)")
        placed, kept_groups = False, []
        for group in groups:
            members = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(members, list) or not any(is_ours(h) for h in members):
                kept_groups.append(group)
                continue
            kept = [h for h in members if not is_ours(h)]
            if ours is not None and not placed:
                kept.insert(next(i for i, h in enumerate(members) if is_ours(h)), ours)
                placed = True
            if kept:
                kept_groups.append({**group, "hooks": kept})
        if ours is not None and not placed:
            kept_groups.append({"hooks": [ours]})
        if kept_groups:
            hooks[event] = kept_groups
        else:
            hooks.pop(event, None)
    if not hooks:
        doc.pop("hooks")
