"""What a newcomer meets before the code: the README's commands, the licence, the source
distribution and the declared dependencies."""

from __future__ import annotations

import re
from pathlib import Path

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
