"""The shape of the code: imports flow server -> ranking -> indexing, the core never sees MCP,
every module ships in the package, and the tests mirror the tree."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ORDER = {"server": 2, "ranking": 1, "indexing": 0}
MAX_LINES = 450


def modules() -> list[Path]:
    return sorted(p for layer in ORDER for p in (ROOT / layer).rglob("*.py") if "__pycache__" not in p.parts)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(("agentmemrec", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def imported_layers(path: Path) -> set[str]:
    layers = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import; import from agentmemrec.<layer> instead"
            names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            head = name.split(".")
            if head[0] == "agentmemrec" and len(head) > 1:
                layers.add(head[1])
            elif head[0] == "mcp":
                layers.add("mcp")
    return layers


def test_imports_flow_one_way_and_the_core_never_imports_mcp():
    for path in modules():
        layer = path.relative_to(ROOT).parts[0]
        used = imported_layers(path)
        assert all(ORDER[u] <= ORDER[layer] for u in used if u in ORDER), f"{path} imports upward: {used}"
        if layer != "server":
            assert "mcp" not in used, f"{path} imports mcp"


def test_every_module_imports_from_the_installed_package():
    for path in modules():
        if path.name == "__main__.py":
            continue
        module = importlib.import_module(module_name(path))
        assert Path(module.__file__).resolve() == path.resolve(), f"{module.__name__} is not {path}"


@pytest.mark.parametrize("module", ["agentmemrec.indexing.dense.ann", "agentmemrec.indexing.dense.index"])
def test_a_module_that_loads_native_libraries_imports_first_in_a_fresh_process(module):
    """The test above imports everything in one process, where whatever came first loaded the
    native libraries; usearch loaded before onnxruntime made onnxruntime's import crash it."""
    done = subprocess.run([sys.executable, "-c", f"import {module}; import onnxruntime"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, f"importing {module} first: exit {done.returncode}, {done.stderr[-400:]}"


def test_no_module_outgrows_a_reading():
    long = {str(p.relative_to(ROOT)): n for p in modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these by concern: {long}"


def test_the_tests_mirror_the_source_tree():
    for folder in (ROOT / "tests").rglob("*"):
        if folder.is_dir() and folder.name != "__pycache__":
            assert (ROOT / folder.relative_to(ROOT / "tests")).is_dir(), f"{folder} mirrors no source folder"


@pytest.mark.timeout(180)
def test_a_built_wheel_holds_every_module_and_the_shipped_data(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    str(ROOT), "-w", str(tmp_path)], check=True, capture_output=True)
    [wheel] = tmp_path.glob("agentmemrec-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {module_name(p).replace(".", "/") + ("/__init__.py" if p.name == "__init__.py" else ".py")
                for p in modules()}
    assert expected <= names, f"missing from the wheel: {sorted(expected - names)}"
    data = {f"agentmemrec/ranking/models/{p.name}" for p in (ROOT / "ranking" / "models").glob("*.json")}
    data |= {f"agentmemrec/server/demo/{p.name}" for p in (ROOT / "server" / "demo").glob("*.jsonl")}
    assert data and data <= names, f"data missing from the wheel: {sorted(data - names)}"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), "the wheel carries no licence"
    assert not any(n.split("/")[0] in ORDER for n in names), "a bare top-level package would shadow others"
