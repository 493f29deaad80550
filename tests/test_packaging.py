"""What a newcomer meets before the code: the README's commands, the licence, the source
distribution and the declared dependencies."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def sh_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```sh\n(.*?)```", text, re.S)]


def test_the_readme_first_commands_are_one_line_each_and_upgrade_pip_before_installing():
    """A venv's bundled pip (23.2 on Python 3.11) backtracks for over 15 minutes over the test
    extra; .ci/run upgrades it first, and so must a newcomer."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("-m pip install -q --upgrade pip") < ci.index("pip install -q -e '.[test]'")
    for block in sh_blocks(README)[:2]:
        assert len(block.splitlines()) == 1, block
        assert block.index(".venv/bin/python -m pip install -q --upgrade pip") < block.index("pip install -e"), block


def test_the_readme_installs_from_a_clone_since_the_package_is_not_on_pypi():
    assert not re.search(r"pip install agentmemrec(?!\[)", README.replace("'agentmemrec[", "")), \
        "agentmemrec is not on PyPI: say how to install it from a clone"
    assert "not on PyPI" in README and "pip install -e ." in sh_blocks(README)[0]


def test_the_licence_is_the_apache_2_0_text_the_package_declares():
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:5] == ["Apache", "License", "Version", "2.0,", "January"]
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply the Apache License" in text
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert (pyproject["license"], pyproject["license-files"]) == ("Apache-2.0", ["LICENSE"])


def shipped_folders() -> set[str]:
    return {p.relative_to(ROOT).as_posix() for folder in ("docs", "tests", "bench") for p in (ROOT / folder).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


@pytest.mark.timeout(180)
def test_the_source_distribution_carries_the_licence_docs_tests_and_benchmarks(tmp_path):
    """Unpacked, an sdist installs with its test extra and runs its tests as a clone does."""
    pytest.importorskip("setuptools", minversion="77")  # what pyproject's build-system requires
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv", "*.egg-info", "__pycache__", "build",
                                                              "dist", ".pytest_cache", ".hypothesis"))
    build = "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"
    done = subprocess.run([sys.executable, "-c", build, str(tmp_path / "dist")], cwd=src, capture_output=True,
                          text=True, timeout=170)
    assert done.returncode == 0, done.stderr[-2000:]
    with tarfile.open(tmp_path / "dist" / done.stdout.split()[-1]) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
        pkg_info = sdist.extractfile(f"{sdist.getnames()[0].split('/')[0]}/PKG-INFO").read().decode()
    wanted = {"LICENSE", "mcp.json.example", ".ci/run", "README.md", "pyproject.toml", "setup.py"} | shipped_folders()
    assert wanted <= names, f"missing from the sdist: {sorted(wanted - names)[:20]}"
    assert "License-Expression: Apache-2.0" in pkg_info and "License-File: LICENSE" in pkg_info


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    return {normalized(re.match(r"[A-Za-z0-9._-]+", r)[0]) for r in requirements}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_distribution_the_package_imports_is_declared_not_only_present_through_another():
    """mcp brings starlette, uvicorn and httpx2 today; a later mcp need not, and the server imports
    them itself. Each top-level import maps to the distribution that provides it here."""
    provides = importlib.metadata.packages_distributions()
    imported = set()
    for path in (p for layer in ("server", "indexing", "ranking") for p in (ROOT / layer).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"agentmemrec"}
    undeclared = {m: provides.get(m, [m]) for m in third_party
                  if not any(normalized(d) in declared() for d in provides.get(m, [m]))}
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"


def test_the_docs_say_how_to_uninstall_with_commands_that_exist():
    section = (ROOT / "docs" / "usage.md").read_text().split("## Uninstall", 1)[1].split("\n## ", 1)[0]
    commands = [line.split("#")[0].strip() for line in sh_blocks(section)[0].splitlines()]
    assert commands[-1] == "pip uninstall agentmemrec"
    for command in (c.split()[1:] for c in commands if c.startswith("agentmemrec ")):
        shown = subprocess.run([sys.executable, "-m", "agentmemrec.server.cli", command[0], "--help"],
                               capture_output=True, text=True, timeout=60).stdout
        assert all(word in shown for word in command if word.startswith("--")), (command, shown)
