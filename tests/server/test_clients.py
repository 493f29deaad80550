"""`agentmemrec setup` against client configuration folders that already hold other servers,
hooks and state: merged, idempotent, backed up, shown as a diff on --dry-run, taken out by
--remove. Every path is under tmp_path; the real ~/.claude and AgentMemRec home are never touched."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from agentmemrec.server.cli import main
from agentmemrec.server.clients import desktop_config, instructions

CLAUDE_JSON = {"numStartups": 12, "mcpServers": {"github": {"command": "gh-mcp"}},
               "projects": {"/elsewhere": {"mcpServers": {"db": {"command": "db-mcp"}}, "history": ["x"]}}}
SETTINGS = {"permissions": {"allow": ["Bash(ls)"]}, "hooks": {
    "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "echo branch"}]}],
    "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "guard.sh"}]}]}}


@pytest.fixture(autouse=True)
def own_homes(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Setup records what it set up in AgentMemRec's home: each test has its own, and a home
    folder of its own, so the real ones are never read or written."""
    (tmp_path / "os-home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "os-home"))


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    user, repo = tmp_path / "user", tmp_path / "src" / "payments-api"
    (repo / ".git").mkdir(parents=True)
    (repo / ".claude").mkdir()
    user.mkdir()
    (user / ".claude.json").write_text(json.dumps(CLAUDE_JSON))
    (repo / ".claude" / "settings.local.json").write_text(json.dumps(SETTINGS, indent=4))
    return user, repo


def setup(user: Path, folder: Path, client: str, *extra: str) -> int:
    return main(["setup", client, "--dir", str(folder), "--user-dir", str(user), *extra])


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def test_claude_code_gets_the_server_and_both_hooks_beside_what_was_there(folders, home, capsys):
    user, repo = folders
    (repo / "src").mkdir()
    assert setup(user, repo / "src", "claude-code") == 0  # a folder inside: its repository is set up
    out = capsys.readouterr().out
    claude = read(user / ".claude.json")
    server = claude["projects"][str(repo)]["mcpServers"]["agentmemrec"]
    assert server["type"] == "stdio" and server["args"][-6:] == ["serve", "--project", "payments-api",
                                                               "--capture-claude-code", "--watch", str(repo)]
    assert server["env"] == {"AGENTMEMREC_HOME": str(home.resolve())}
    assert {k: v for k, v in claude.items() if k != "projects"} == {k: v for k, v in CLAUDE_JSON.items()
                                                                    if k != "projects"}
    assert claude["projects"]["/elsewhere"] == CLAUDE_JSON["projects"]["/elsewhere"]
    settings = read(repo / ".claude" / "settings.local.json")
    assert settings["permissions"] == SETTINGS["permissions"] and settings["hooks"]["PreToolUse"] == \
        SETTINGS["hooks"]["PreToolUse"]
    prompt = settings["hooks"]["UserPromptSubmit"]
    assert prompt[0] == SETTINGS["hooks"]["UserPromptSubmit"][0]  # the other tool's hook stays first
    [ours] = prompt[1]["hooks"]
    words = shlex.split(ours["command"])
    assert words[0] == f"AGENTMEMREC_HOME={home.resolve()}"
    assert words[-4:] == ["hook", "claude-code", "--project", "payments-api"]
    assert settings["hooks"]["SessionStart"] == [{"hooks": [ours]}] and ours["timeout"] == 5
    for path in (user / ".claude.json", repo / ".claude" / "settings.local.json"):
        assert f"{path}: updated (the previous file is {path}.agentmemrec.bak)" in out
    assert read(user / ".claude.json.agentmemrec.bak") == CLAUDE_JSON


def test_the_personal_settings_and_backups_stay_out_of_git(tmp_path, capsys):
    user, repo = tmp_path / "user", tmp_path / "payments-api"
    user.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".claude").mkdir()
    (repo / ".claude" / "settings.local.json").write_text(json.dumps(SETTINGS))  # a backup is made
    assert setup(user, repo, "claude-code") == 0
    assert (repo / ".claude" / "settings.local.json.agentmemrec.bak").exists()
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo,
                            capture_output=True, text=True, check=True).stdout
    assert status == ""
    assert setup(user, repo, "claude-code") == 0 and "exclude: already set up" in capsys.readouterr().out


def test_a_dir_that_does_not_exist_is_refused_and_nothing_is_written(tmp_path, capsys):
    user = tmp_path / "user"
    user.mkdir()
    assert setup(user, tmp_path / "nope", "claude-code") == 2
    assert "--dir" in capsys.readouterr().err
    assert not (tmp_path / "nope").exists() and list(user.iterdir()) == []


def test_running_setup_twice_changes_nothing(folders, home, capsys):
    user, repo = folders
    assert setup(user, repo, "claude-code") == 0
    files = [user / ".claude.json", repo / ".claude" / "settings.local.json", repo / ".git" / "info" / "exclude",
             home / "setups.json"]
    first = [p.read_bytes() for p in files]
    backups = [p.with_name(p.name + ".agentmemrec.bak").read_bytes() for p in files[:2]]
    capsys.readouterr()
    assert setup(user, repo, "claude-code") == 0
    assert capsys.readouterr().out.count("already set up") == 4
    assert [p.read_bytes() for p in files] == first
    assert [p.with_name(p.name + ".agentmemrec.bak").read_bytes() for p in files[:2]] == backups


def test_dry_run_prints_the_diff_and_writes_nothing(folders, capsys):
    user, repo = folders
    before = (user / ".claude.json").read_bytes()
    assert setup(user, repo, "claude-code", "--dry-run") == 0
    out = capsys.readouterr().out
    assert f"+++ {user / '.claude.json'} (after setup)" in out and '+        "agentmemrec": {' in out
    assert "hook claude-code --project payments-api" in out and out.endswith("dry run: nothing was written\n")
    assert (user / ".claude.json").read_bytes() == before
    assert not list(user.glob("*.agentmemrec.bak"))


def test_remove_takes_out_only_what_setup_added(folders, home, capsys):
    user, repo = folders
    assert setup(user, repo, "claude-code") == 0
    assert setup(user, repo, "claude-code", "--remove") == 0
    assert read(home / "setups.json") == {}
    claude = read(user / ".claude.json")
    assert claude["projects"][str(repo)] == {}  # the mcpServers setup made went with our entry
    assert {k: v for k, v in claude.items() if k != "projects"} == {k: v for k, v in CLAUDE_JSON.items()
                                                                    if k != "projects"}
    assert read(repo / ".claude" / "settings.local.json") == SETTINGS
    capsys.readouterr()
    assert setup(user, repo, "claude-code", "--remove") == 0
    assert capsys.readouterr().out.count("nothing of agentmemrec in it") == 3


def test_remove_keeps_the_repositorys_other_servers(folders, capsys):
    user, repo = folders
    claude = read(user / ".claude.json")
    claude["projects"][str(repo)] = {"mcpServers": {"db": {"command": "db-mcp"}}, "history": ["y"]}
    (user / ".claude.json").write_text(json.dumps(claude))
    assert setup(user, repo, "claude-code") == 0
    assert setup(user, repo, "claude-code", "--remove") == 0
    assert read(user / ".claude.json")["projects"][str(repo)] == claude["projects"][str(repo)]


def test_claude_desktop_setup_writes_under_user_dir_whatever_xdg_config_home_says(folders, tmp_path):
    user, repo = folders
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "real-config")}  # read when the command starts
    for extra in ([], ["--remove"]):
        subprocess.run([sys.executable, "-m", "agentmemrec.server.cli", "setup", "claude-desktop", "--dir", str(repo),
                        "--user-dir", str(user), *extra], env=env, check=True, capture_output=True)
        servers = read(user / ".config" / "Claude" / "claude_desktop_config.json")["mcpServers"]
        assert ("agentmemrec" in servers) == (not extra)
        assert not (tmp_path / "real-config").exists()


def test_cursor_and_claude_desktop_get_the_server_entry(folders, monkeypatch):
    user, repo = folders
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    desktop = user / ".config" / "Claude" / "claude_desktop_config.json"
    desktop.parent.mkdir(parents=True)
    desktop.write_text(json.dumps({"mcpServers": {"fs": {"command": "fs-mcp"}}, "theme": "dark"}))
    assert setup(user, repo, "claude-desktop", "--project", "shared") == 0
    assert setup(user, repo, "cursor") == 0
    config = read(desktop)
    assert config["theme"] == "dark" and config["mcpServers"]["fs"] == {"command": "fs-mcp"}
    assert config["mcpServers"]["agentmemrec"]["args"][-3:] == ["serve", "--project", "shared"]
    cursor = read(repo / ".cursor" / "mcp.json")
    assert cursor["mcpServers"]["agentmemrec"]["args"][-5:] == ["serve", "--project", "payments-api", "--watch",
                                                                str(repo)]
    assert setup(user, repo, "cursor", "--no-watch") == 0
    assert read(repo / ".cursor" / "mcp.json")["mcpServers"]["agentmemrec"]["args"][-1] == "payments-api"
    assert "type" not in cursor["mcpServers"]["agentmemrec"]


def test_claude_desktop_config_lives_where_each_os_keeps_it(tmp_path):
    mac = tmp_path / "Library" / "Application Support" / "Claude" / "claude_desktop_config.json"
    assert desktop_config(tmp_path, "darwin") == mac
    assert desktop_config(tmp_path, "win32", {"APPDATA": "C:/Users/me/AppData/Roaming"}) == \
        Path("C:/Users/me/AppData/Roaming/Claude/claude_desktop_config.json")
    assert desktop_config(tmp_path, "linux", {}) == tmp_path / ".config/Claude/claude_desktop_config.json"


def test_a_config_that_is_not_json_is_left_alone_with_a_clear_error(folders, capsys):
    user, repo = folders
    (user / ".claude.json").write_text("{broken")
    assert setup(user, repo, "claude-code") == 2
    assert "is not valid JSON (line 1" in capsys.readouterr().err
    assert (user / ".claude.json").read_text() == "{broken"
    assert read(repo / ".claude" / "settings.local.json") == SETTINGS


@pytest.mark.parametrize("client", ["claude-code", "cursor", "claude-desktop"])
def test_setup_with_a_team_store_is_refused_and_points_to_the_http_server(folders, home, monkeypatch, capsys, client):
    """Before, it wrote command hooks that never answer on a PostgreSQL store, and a local server
    that used the home's DuckDB file instead of the team's store."""
    user, repo = folders
    before = {p: p.read_bytes() for p in (user / ".claude.json", repo / ".claude" / "settings.local.json")}
    monkeypatch.setenv("AGENTMEMREC_STORE", "postgresql://memory@db.example.internal/memory")
    assert setup(user, repo, client) == 2
    err = capsys.readouterr().err
    assert "AGENTMEMREC_STORE names a PostgreSQL store" in err and "agentmemrec serve --http" in err
    assert "Nothing was written" in err and len(err.strip().splitlines()) == 1
    assert {p: p.read_bytes() for p in before} == before and not (repo / ".cursor").exists()


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          capture_output=True, text=True, check=True).stdout


def test_cursor_files_holding_this_machines_paths_stay_out_of_git(tmp_path, capsys):
    user, repo = tmp_path / "user", tmp_path / "web-frontend"
    user.mkdir()
    git(tmp_path, "init", "-q", str(repo))
    for extra in ([], [], ["--remove"]):  # the second run makes a backup
        assert setup(user, repo, "cursor", *extra) == 0
    assert (repo / ".cursor" / "mcp.json.agentmemrec.bak").exists()
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""
    assert "note:" not in capsys.readouterr().out


def test_cursor_gets_a_rule_that_puts_the_memory_in_every_request_and_remove_deletes_only_ours(tmp_path, capsys):
    """Cursor's hooks cannot add a slate to a prompt, and before, its agent heard of the memory
    only in the instructions the server gives at initialize, which a client need not show it."""
    user, repo = tmp_path / "user", tmp_path / "web-frontend"
    user.mkdir()
    git(tmp_path, "init", "-q", str(repo))
    rule = repo / ".cursor" / "rules" / "agentmemrec.mdc"
    assert setup(user, repo, "cursor") == 0
    _, front, body = rule.read_text().split("---\n", 2)
    assert "alwaysApply: true" in front.splitlines() and front.startswith("description: ")
    assert instructions(hooked=False, captured=False) in body and "project web-frontend" in body
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""  # kept out of git
    written = rule.read_bytes()
    assert setup(user, repo, "cursor") == 0 and rule.read_bytes() == written
    assert f"{rule}: already set up" in capsys.readouterr().out
    assert setup(user, repo, "cursor", "--remove") == 0
    assert not rule.exists() and f"{rule}: deleted (setup wrote it)" in capsys.readouterr().out
    assert setup(user, repo, "cursor") == 0
    rule.write_text("---\nalwaysApply: true\n---\nOur team's own words about agentmemrec.\n")  # made theirs
    assert setup(user, repo, "cursor", "--remove") == 0
    assert rule.read_text().endswith("own words about agentmemrec.\n")
    assert f"note: {rule} no longer carries setup's mark, so it was left as it is" in capsys.readouterr().out


def test_a_cursor_config_the_repository_tracks_is_left_tracked_and_setup_says_so(tmp_path, capsys):
    user, repo = tmp_path / "user", tmp_path / "web-frontend"
    user.mkdir()
    git(tmp_path, "init", "-q", str(repo))
    (repo / ".cursor").mkdir()
    (repo / ".cursor" / "mcp.json").write_text(json.dumps({"mcpServers": {"db": {"command": "db-mcp"}}}))
    git(repo, "add", ".cursor/mcp.json")
    git(repo, "commit", "-qm", "the team's servers")
    assert setup(user, repo, "cursor") == 0
    assert "note: .cursor/mcp.json is tracked by git, so it is not excluded" in capsys.readouterr().out
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == " M .cursor/mcp.json\n"


@pytest.mark.parametrize("client", ["claude-code", "cursor"])
def test_setup_outside_a_repository_is_refused_unless_dir_names_the_folder(tmp_path, monkeypatch, capsys, client):
    user, folder = tmp_path / "user", tmp_path / "notes"
    user.mkdir()
    folder.mkdir()
    monkeypatch.chdir(folder)
    assert main(["setup", client, "--user-dir", str(user)]) == 2
    err = capsys.readouterr().err
    assert f"{folder.resolve()} is not in a git repository: run setup in the repository, or name the folder" in err
    assert list(user.iterdir()) == [] and list(folder.iterdir()) == []
    assert main(["setup", client, "--user-dir", str(user), "--dir", "."]) == 0
    assert f"set up for project notes in {folder.resolve()}" in capsys.readouterr().out


@pytest.mark.parametrize("client", ["claude-code", "cursor"])
def test_a_home_folder_or_the_root_is_never_watched(tmp_path, monkeypatch, capsys, client):
    user = tmp_path / "me"
    (user / ".git").mkdir(parents=True)  # a home kept in git (dotfiles) is no exception
    monkeypatch.setenv("HOME", str(user))
    for folder, said in ((user, "is your home folder"), (Path("/"), "is the filesystem's root")):
        assert main(["setup", client, "--dir", str(folder), "--user-dir", str(user)]) == 2
        assert f"{said}: its server would watch every file under it" in capsys.readouterr().err
    assert sorted(p.name for p in user.iterdir()) == [".git"]
    assert main(["setup", client, "--dir", str(user), "--user-dir", str(user), "--no-watch", "--dry-run"]) == 0


def test_claude_desktop_set_up_outside_a_repository_serves_the_default_project(tmp_path, monkeypatch, capsys):
    user, folder = tmp_path / "user", tmp_path / "Downloads"
    user.mkdir()
    folder.mkdir()
    monkeypatch.chdir(folder)
    assert main(["setup", "claude-desktop", "--user-dir", str(user)]) == 0
    servers = read(user / ".config" / "Claude" / "claude_desktop_config.json")["mcpServers"]
    assert servers["agentmemrec"]["args"][-3:] == ["serve", "--project", "default"]
    assert "claude-desktop: set up for project default; quit and restart" in capsys.readouterr().out


@pytest.mark.parametrize("client", ["claude-code", "cursor"])
def test_a_second_repository_of_the_same_name_is_refused_its_own_project_or_sharing_is_asked_for(
        tmp_path, home, capsys, client):
    user, first, second = tmp_path / "user", tmp_path / "work" / "api", tmp_path / "side" / "api"
    user.mkdir()
    for repo in (first, second):
        git(tmp_path, "init", "-q", str(repo))
    git(first, "commit", "-q", "--allow-empty", "-m", "start")
    assert setup(user, first, "claude-code") == 0
    git(first, "worktree", "add", "-q", str(tmp_path / "api-feature"))
    assert setup(user, tmp_path / "api-feature", client, "--dry-run") == 0  # a worktree of the same repository
    capsys.readouterr()
    claude, files = (user / ".claude.json").read_bytes(), sorted(second.rglob("*"))
    assert setup(user, second, client) == 2
    err = capsys.readouterr().err
    assert f"{first} is already set up for project api, the name of this repository too: the two would " \
           "share one memory" in err and "--project side-api" in err and len(err.strip().splitlines()) == 1
    assert (user / ".claude.json").read_bytes() == claude and sorted(second.rglob("*")) == files
    assert setup(user, second, client, "--project", "side-api") == 0
    assert "set up for project side-api" in capsys.readouterr().out
    assert setup(user, second, client, "--project", "api", "--dry-run") == 0  # shared on purpose
    (first / ".git").rename(first / "old.git")  # the first is gone: its entry no longer claims the name
    assert setup(user, second, client, "--dry-run") == 0


def files_under(*roots: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for root in roots for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize(("first_client", "client"), [("cursor", "cursor"), ("cursor", "claude-code"),
                                                      ("claude-desktop", "cursor")])
def test_a_repository_set_up_for_any_client_keeps_its_name_from_a_second_repository_of_that_name(
        tmp_path, home, capsys, first_client, client):
    """Before, only Claude Code's ~/.claude.json was read: a repository set up for Cursor or
    Claude Desktop alone was not seen, and a second `api` silently shared its memory."""
    user, first, second = tmp_path / "user", tmp_path / "work" / "api", tmp_path / "side" / "api"
    user.mkdir()
    for repo in (first, second):
        git(tmp_path, "init", "-q", str(repo))
    git(first, "commit", "-q", "--allow-empty", "-m", "start")
    assert setup(user, first, first_client) == 0
    assert not (user / ".claude.json").exists()  # nothing of it where the old check looked
    git(first, "worktree", "add", "-q", str(tmp_path / "api-feature"))
    assert setup(user, tmp_path / "api-feature", client, "--dry-run") == 0  # a worktree of the same repository
    capsys.readouterr()
    before = files_under(user, home, second)
    assert setup(user, second, client) == 2
    err = capsys.readouterr().err
    assert f"{first} is already set up for project api, the name of this repository too: the two would " \
           "share one memory" in err and "--project side-api" in err and len(err.strip().splitlines()) == 1
    assert files_under(user, home, second) == before  # nothing was written
    assert setup(user, second, client, "--project", "side-api") == 0
    assert read(home / "setups.json")[str(second)] == {client: "side-api"}
    assert setup(user, first, first_client, "--remove") == 0
    assert str(first) not in read(home / "setups.json")
    assert setup(user, second, client) == 0  # the first is no longer set up: the name is free
    assert read(home / "setups.json") == {str(second): {client: "api"}}


def test_claude_desktop_set_up_in_another_repository_is_recorded_there_only(tmp_path, home, capsys):
    """Claude Desktop has one server for every conversation: set up again elsewhere, it no
    longer serves the first repository's project, which is then free for a same-named one."""
    user, api, web, other_api = tmp_path / "user", tmp_path / "work" / "api", tmp_path / "work" / "web", \
        tmp_path / "side" / "api"
    user.mkdir()
    for repo in (api, web, other_api):
        git(tmp_path, "init", "-q", str(repo))
    assert setup(user, api, "claude-desktop") == 0 and setup(user, api, "cursor") == 0
    assert setup(user, web, "claude-desktop") == 0
    assert read(home / "setups.json") == {str(api): {"cursor": "api"}, str(web): {"claude-desktop": "web"}}
    assert setup(user, api, "cursor", "--remove") == 0
    assert setup(user, other_api, "cursor") == 0


@pytest.mark.parametrize("extra", [[], ["--remove"]])
def test_a_broken_record_of_setups_is_left_alone_with_a_clear_error(tmp_path, home, capsys, extra):
    user, repo = tmp_path / "user", tmp_path / "api"
    user.mkdir()
    git(tmp_path, "init", "-q", str(repo))
    home.mkdir(mode=0o700)
    (home / "setups.json").write_text('{"/work/api": ')
    assert setup(user, repo, "cursor", *extra) == 2
    err = capsys.readouterr().err
    assert f"{home / 'setups.json'} is not valid JSON (line 1" in err and "nothing was written" in err
    assert (home / "setups.json").read_text() == '{"/work/api": ' and not (repo / ".cursor").exists()
    assert list(home.iterdir()) == [home / "setups.json"]


def test_the_record_of_setups_is_yours_alone(tmp_path, home):
    user, repo = tmp_path / "user", tmp_path / "api"
    user.mkdir()
    git(tmp_path, "init", "-q", str(repo))
    home.mkdir(mode=0o755)
    os.chmod(home, 0o755)  # whatever the umask
    (home / "setups.json").write_text("{}")
    os.chmod(home / "setups.json", 0o644)
    assert setup(user, repo, "cursor") == 0
    assert read(home / "setups.json") == {str(repo): {"cursor": "api"}}
    assert (home.stat().st_mode & 0o777, (home / "setups.json").stat().st_mode & 0o777) == (0o700, 0o600)


def test_a_claude_code_setup_made_before_the_record_still_keeps_its_name(tmp_path, home, capsys):
    user, first, second = tmp_path / "user", tmp_path / "work" / "api", tmp_path / "side" / "api"
    user.mkdir()
    for repo in (first, second):
        git(tmp_path, "init", "-q", str(repo))
    assert setup(user, first, "claude-code") == 0
    (home / "setups.json").unlink()  # as a setup of an earlier version left it: ~/.claude.json alone
    assert setup(user, second, "cursor") == 2
    assert f"{first} is already set up for project api" in capsys.readouterr().err
    assert not (home / "setups.json").exists() and not (second / ".cursor").exists()
