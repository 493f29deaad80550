"""The ranker's boosters compiled to machine code: LightGBM's scores bit for bit, compiled once
per machine and loaded after, refused when they differ, and what a real server predicts with."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import anyio
import numpy as np
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from agentmemrec.ranking import compiled
from agentmemrec.ranking.learned import RankerModel
from agentmemrec.server.demo import server_params

from helpers import call, turn

pytestmark = pytest.mark.skipif(not compiled.available(), reason="lleaves has no build for this Python")
RECORDED = json.loads((Path(__file__).parent / "exact_recall.json").read_text())
SHIPPED = "lexical-ranker.json"  # the smallest shipped ranker: the one a server without models runs


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An XDG cache home whose ranker folder holds the shipped ranker's boosters, compiled once."""
    xdg = tmp_path_factory.mktemp("xdg")
    thread = RankerModel.shipped(SHIPPED).compile(xdg / "agentmemrec" / "ranker")
    assert thread is not None
    thread.join(timeout=240)
    return xdg


def lightgbm_scores(model: RankerModel, x: np.ndarray) -> np.ndarray:
    return np.mean([b.predict(x, num_threads=1) for b in model.boosters], axis=0)


def test_compiled_boosters_score_the_recorded_pools_bit_for_bit(cache):
    model = RankerModel.shipped(SHIPPED)
    x = np.array([row for q in RECORDED["queries"] for row in q["features"]], dtype=np.float64)  # None -> NaN
    before = model.predict(x)
    assert model.code == "lightgbm"
    model.compile(cache / "agentmemrec" / "ranker").join(timeout=60)
    assert model.code == "compiled"
    assert np.array_equal(model.predict(x), before)
    assert np.array_equal(model.predict(x[:7]), lightgbm_scores(model, x[:7]))  # one thread below 256 rows


def test_a_second_start_loads_the_objects_without_compiling(cache, caplog):
    folder = cache / "agentmemrec" / "ranker"
    objects = {p: p.stat().st_ino for p in folder.glob("*.so")}
    assert len(objects) == len(RankerModel.shipped(SHIPPED).boosters)
    model = RankerModel.shipped(SHIPPED)
    with caplog.at_level(logging.INFO, logger="agentmemrec.ranking.compiled"):
        model.compile(folder).join(timeout=60)
    assert model.code == "compiled"
    assert "compiling" not in caplog.text
    assert {p: p.stat().st_ino for p in folder.glob("*.so")} == objects  # none written again


def test_objects_that_score_otherwise_are_refused_and_lightgbm_predicts(cache, tmp_path, caplog):
    folder = tmp_path / "ranker"
    shutil.copytree(cache / "agentmemrec" / "ranker", folder)
    model = RankerModel.shipped(SHIPPED)
    names = [compiled.key(b.model_to_string()) for b in model.boosters]
    first, second = folder / f"{names[0]}.so", folder / f"{names[1]}.so"
    first_bytes = first.read_bytes()
    first.write_bytes(second.read_bytes())  # booster 0's name now holds booster 1's code
    second.write_bytes(first_bytes)
    with caplog.at_level(logging.WARNING, logger="agentmemrec.ranking.compiled"):
        model.compile(folder).join(timeout=60)
    assert model.code == "lightgbm"
    assert "scores differ from LightGBM's" in caplog.text and str(folder) in caplog.text


def test_the_cache_keeps_the_most_recently_used_objects(cache, tmp_path, monkeypatch):
    folder = tmp_path / "ranker"
    shutil.copytree(cache / "agentmemrec" / "ranker", folder)
    model = RankerModel.shipped(SHIPPED)
    names = {compiled.key(b.model_to_string()) for b in model.boosters}
    for i in range(3):  # another ranker's objects, used long ago
        for suffix in (".so", ".txt", ".lock"):
            (folder / f"old{i}{suffix}").write_text("")
        os.utime(folder / f"old{i}.so", (1e9 + i, 1e9 + i))
    for name in names:
        os.utime(folder / f"{name}.so", (2e9, 2e9))  # the ranker's own are older than this minute
    monkeypatch.setattr(compiled, "KEEP", len(names) + 1)
    model.compile(folder).join(timeout=60)
    assert model.code == "compiled"
    assert {p.stem for p in folder.glob("*.so")} == names | {"old2"}  # used now, then the newest old one
    assert not (folder / "old0.txt").exists() and not (folder / "old1.lock").exists()


@pytest.mark.anyio
async def test_a_real_server_predicts_with_the_compiled_boosters(cache, tmp_path):
    params = server_params(tmp_path / "home", "alpha")
    params = StdioServerParameters(command=params.command, args=params.args,
                                   env={**params.env, "XDG_CACHE_HOME": str(cache),
                                        "AGENTMEMREC_COMPILE_RANKER": "1"})
    with anyio.fail_after(90):
        async with Client(params) as client:
            await call(client, "remember", items=[turn("The CI runs on GitHub Actions.", ref="ci")])
            code = None
            while code != "compiled":  # the server loads them in the background, after its start
                slate = await call(client, "recall_slate", query="which CI do we run on")
                why = await call(client, "explain_selection", slate_id=slate["slate_id"])
                code = why["models"]["ranker_code"]
                assert code in ("lightgbm", "compiled")
                await anyio.sleep(0.2)
            assert [i["ref"] for i in slate["items"]] == ["ci"]


@pytest.mark.anyio
async def test_a_server_told_not_to_compile_predicts_with_lightgbm(cache, tmp_path):
    params = server_params(tmp_path / "home", "alpha")
    params = StdioServerParameters(command=params.command, args=params.args,
                                   env={**params.env, "XDG_CACHE_HOME": str(cache),
                                        "AGENTMEMREC_COMPILE_RANKER": "0"})
    with anyio.fail_after(90):
        async with Client(params) as client:
            await call(client, "remember", items=[turn("The CI runs on GitHub Actions.", ref="ci")])
            await anyio.sleep(2)  # long enough to load the cached objects, had it been told to
            slate = await call(client, "recall_slate", query="which CI do we run on")
            why = await call(client, "explain_selection", slate_id=slate["slate_id"])
            assert why["models"]["ranker_code"] == "lightgbm"
