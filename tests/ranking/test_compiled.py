"""The ranker's boosters compiled to machine code: LightGBM's scores bit for bit, compiled once
per machine and loaded after, refused when they differ, and what a real server predicts with."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import anyio
import lightgbm as lgb
import numpy as np
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from agentmemrec.ranking import compiled
from agentmemrec.ranking.features import FEATURE_NAMES
from agentmemrec.ranking.learned import RankerModel
from agentmemrec.server.demo import server_params

from helpers import call, turn

pytestmark = pytest.mark.skipif(not compiled.available(), reason="lleaves has no build for this Python")
RECORDED = json.loads((Path(__file__).parent / "exact_recall.json").read_text())


def shipped_booster() -> RankerModel:
    """The shipped lexical ranker's smallest booster (about 140 trees), as a model of its own:
    compiling all five would take a core for 20 s."""
    shipped = RankerModel.shipped("lexical-ranker.json")
    return RankerModel(shipped.boosters[-1:], shipped.meta)


def tiny_model(path: Path) -> RankerModel:
    """Two small boosters trained here on random pools, saved where a server can load them."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, len(FEATURE_NAMES)))
    x[rng.random(x.shape) < 0.2] = np.nan
    boosters = tuple(lgb.train({"objective": "lambdarank", "num_leaves": 15, "min_data_in_leaf": 5, "seed": seed,
                                "bagging_fraction": 0.8, "bagging_freq": 1, "verbose": -1},
                               lgb.Dataset(x, rng.integers(0, 3, len(x)), group=[30] * 20), num_boost_round=20)
                     for seed in (1, 2))
    RankerModel(boosters, RankerModel.shipped("lexical-ranker.json").meta).save(path)
    return RankerModel.read(path)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An XDG cache home whose ranker folder holds the shipped booster and the tiny model, compiled
    once; the tiny model's file is `tiny.json` beside it."""
    xdg = tmp_path_factory.mktemp("xdg")
    for model in (shipped_booster(), tiny_model(xdg / "tiny.json")):
        thread = model.compile(xdg / "agentmemrec" / "ranker")
        assert thread is not None
        thread.join(timeout=120)
        assert model.code == "compiled"
    return xdg


def lightgbm_scores(model: RankerModel, x: np.ndarray) -> np.ndarray:
    return np.mean([b.predict(x, num_threads=1) for b in model.boosters], axis=0)


@pytest.mark.parametrize("which", ["shipped", "tiny"])
def test_compiled_boosters_score_the_recorded_pools_bit_for_bit(cache, which):
    model = shipped_booster() if which == "shipped" else RankerModel.read(cache / "tiny.json")
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
    assert len(objects) == 3  # the shipped booster and the tiny model's two
    model = shipped_booster()
    with caplog.at_level(logging.INFO, logger="agentmemrec.ranking.compiled"):
        model.compile(folder).join(timeout=60)
    assert model.code == "compiled"
    assert "compiling" not in caplog.text
    assert {p: p.stat().st_ino for p in folder.glob("*.so")} == objects  # none written again


def test_objects_that_score_otherwise_are_refused_and_lightgbm_predicts(cache, tmp_path, caplog):
    folder = tmp_path / "ranker"
    shutil.copytree(cache / "agentmemrec" / "ranker", folder)
    model = RankerModel.read(cache / "tiny.json")
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
    model = RankerModel.read(cache / "tiny.json")
    names = {compiled.key(b.model_to_string()) for b in model.boosters}
    for i in range(3):  # another ranker's objects, used long ago
        for suffix in (".so", ".txt", ".lock"):
            (folder / f"old{i}{suffix}").write_text("")
        os.utime(folder / f"old{i}.so", (1e9 + i, 1e9 + i))
    for p in folder.glob("*.so"):
        if p.stem in names:
            os.utime(p, (2e9, 2e9))  # the model's own are older than this minute
        elif not p.stem.startswith("old"):
            os.utime(p, (1.5e9, 1.5e9))  # the shipped booster's: used after the old ones
    monkeypatch.setattr(compiled, "KEEP", len(names) + 2)
    model.compile(folder).join(timeout=60)
    assert model.code == "compiled"
    kept = {p.stem for p in folder.glob("*.so")}
    assert names <= kept and "old2" in kept and len(kept) == len(names) + 2  # used now, then the newest
    assert not (folder / "old0.txt").exists() and not (folder / "old1.lock").exists()


def _server(cache: Path, home: Path, compile_ranker: str) -> StdioServerParameters:
    params = server_params(home, "alpha")
    return StdioServerParameters(command=params.command,
                                 args=[*params.args, "--ranker-model", str(cache / "tiny.json")],
                                 env={**params.env, "XDG_CACHE_HOME": str(cache),
                                      "AGENTMEMREC_COMPILE_RANKER": compile_ranker})


@pytest.mark.anyio
async def test_a_real_server_predicts_with_the_compiled_boosters(cache, tmp_path):
    with anyio.fail_after(90):
        async with Client(_server(cache, tmp_path / "home", "1")) as client:
            await call(client, "remember", items=[turn("The CI runs on GitHub Actions.", ref="ci")])
            code = None
            while code != "compiled":  # the server loads them in the background, after its start
                slate = await call(client, "recall_slate", with_items=True, query="which CI do we run on")
                why = await call(client, "explain_selection", slate_id=slate["slate_id"])
                code = why["models"]["ranker_code"]
                assert code in ("lightgbm", "compiled")
                await anyio.sleep(0.2)
            assert [i["ref"] for i in slate["items"]] == ["ci"]


@pytest.mark.anyio
async def test_a_server_told_not_to_compile_predicts_with_lightgbm(cache, tmp_path):
    with anyio.fail_after(90):
        async with Client(_server(cache, tmp_path / "home", "0")) as client:
            await call(client, "remember", items=[turn("The CI runs on GitHub Actions.", ref="ci")])
            await anyio.sleep(2)  # long enough to load the cached objects, had it been told to
            slate = await call(client, "recall_slate", query="which CI do we run on")
            why = await call(client, "explain_selection", slate_id=slate["slate_id"])
            assert why["models"]["ranker_code"] == "lightgbm"
