"""The shape of the code: imports flow server -> ranking -> indexing, and the core never sees MCP."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ORDER = {"server": 2, "ranking": 1, "indexing": 0}


def imported_layers(path: Path) -> set[str]:
    layers = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level >= 2 and node.module:
            layers.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("agentmemrec."):
            layers.add(node.module.split(".")[1])
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mcp"):
            layers.add("mcp")
        elif isinstance(node, ast.Import):
            layers |= {"mcp" for a in node.names if a.name.split(".")[0] == "mcp"}
    return layers


def test_imports_flow_one_way_and_the_core_never_imports_mcp():
    for layer, rank in ORDER.items():
        for path in (ROOT / layer).glob("*.py"):
            used = imported_layers(path)
            assert all(ORDER[u] <= rank for u in used if u in ORDER), f"{path} imports upward: {used}"
            if layer != "server":
                assert "mcp" not in used, f"{path} imports mcp"
