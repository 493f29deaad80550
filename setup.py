"""Packaging: `server/`, `indexing/` and `ranking/` install as `agentmemrec.server`,
`agentmemrec.indexing` and `agentmemrec.ranking`, each with every folder found under it (code and
data alike, such as the shipped ranker models), so a new folder ships without being listed by
hand. Everything else is in pyproject.toml."""

from setuptools import find_namespace_packages, setup

LAYERS = ("server", "indexing", "ranking")
found = find_namespace_packages(include=[p for layer in LAYERS for p in (layer, f"{layer}.*")],
                                exclude=["*.__pycache__"])

setup(
    package_dir={f"agentmemrec.{layer}": layer for layer in LAYERS},
    packages=[f"agentmemrec.{name}" for name in found],
)
