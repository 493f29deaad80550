"""The ranker's boosters compiled to machine code (lleaves, over LLVM): the same trees, added up
one at a time in LightGBM's order, so the same scores bit for bit, in a quarter of the time.

Compiling takes seconds per booster (about 23 s for a shipped ranker's five on these cores) and
holds Python's lock while it builds the code, so the process that owns the memory compiles in a
child process, at low priority, and predicts with LightGBM until the compiled boosters load. Each
is kept in the user cache (`$XDG_CACHE_HOME/agentmemrec/ranker` on Linux) under a key of its model
text, the compiler's versions and the host CPU; later starts load and check them in about 0.1 s. A loaded booster
must give LightGBM's scores on a probe before it is used. Without lleaves (it has no build for
every Python), LightGBM predicts as before.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import threading
from importlib import metadata
from pathlib import Path
from typing import Callable, Sequence

import lightgbm as lgb
import numpy as np
import platformdirs

log = logging.getLogger(__name__)
KEY_VERSION = 1  # what a cached object is: one tree per block, fp64, LightGBM's raw score
KEEP = 64  # objects the cache keeps, the most recently used (a shipped ranker has five)


def available() -> bool:
    try:
        import lleaves  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("agentmemrec", appauthor=False)) / "ranker"


def key(model_text: str) -> str:
    """The cache name of one booster's machine code: its text, the compiler, the CPU it runs on."""
    import llvmlite.binding as llvm  # noqa: PLC0415

    llvm.initialize_native_target()
    try:
        features = llvm.get_host_cpu_features().flatten()
    except RuntimeError:  # LLVM cannot tell on some hosts; the name still separates them
        features = ""
    head = "|".join((str(KEY_VERSION), metadata.version("lleaves"), metadata.version("llvmlite"),
                     llvm.get_host_cpu_name(), features))
    return hashlib.sha256(f"{head}\n{model_text}".encode()).hexdigest()[:32]


def load(folder: Path, name: str) -> Callable[[np.ndarray], np.ndarray]:
    """The compiled booster `name` as a function of a float64 feature matrix (loading runs no compiler)."""
    import lleaves  # noqa: PLC0415

    model = lleaves.Model(model_file=str(folder / f"{name}.txt"))
    model.compile(cache=str(folder / f"{name}.so"), raw_score=True, fblocksize=1)
    return lambda x: model.predict(x, n_jobs=1)


def compile_missing(folder: Path, names: Sequence[str]) -> None:
    """Compile each booster whose text is in `folder` and whose object is not (the child's work).
    A lock per booster lets servers that start together compile it once; an object is written
    under a temporary name and renamed, so a reader never loads half of one."""
    import fcntl  # noqa: PLC0415
    import lleaves  # noqa: PLC0415

    os.nice(10)  # a server's recalls come first
    for name in names:
        with open(folder / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if (folder / f"{name}.so").exists():
                continue
            partial = folder / f"{name}.so.{os.getpid()}"
            lleaves.Model(model_file=str(folder / f"{name}.txt")).compile(
                cache=str(partial), raw_score=True, fblocksize=1)
            os.replace(partial, folder / f"{name}.so")


def prune(folder: Path, used: Sequence[str]) -> None:
    """Mark `used` as just used and keep the KEEP most recently used objects (a retrained ranker
    is new code: the cache would grow by one ranker at every training)."""
    for name in used:
        os.utime(folder / f"{name}.so")
    objects = sorted(folder.glob("*.so"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in objects[KEEP:]:
        for suffix in (".so", ".txt", ".lock"):
            (folder / f"{old.stem}{suffix}").unlink(missing_ok=True)


def probe(features: int) -> np.ndarray:
    """Rows that reach many leaves: spread values, zeros and missing ones."""
    rng = np.random.default_rng(0)
    x = rng.normal(0.0, 2.0, (256, features))
    x[rng.random(x.shape) < 0.2] = 0.0
    x[rng.random(x.shape) < 0.2] = np.nan
    return x


def prepare(boosters: Sequence[lgb.Booster], ready: Callable[[list[Callable[[np.ndarray], np.ndarray]]], None],
            folder: Path | None = None) -> threading.Thread | None:
    """In a background thread: compile what the cache lacks (in a child process), load every
    booster, check it against LightGBM on a probe and hand the functions to `ready`. None, and
    LightGBM predicts, when lleaves is not installed."""
    if not available() or not boosters:
        return None
    folder = folder or cache_dir()

    def run() -> None:
        try:
            texts = [b.model_to_string() for b in boosters]
            names = [key(t) for t in texts]
            folder.mkdir(parents=True, exist_ok=True)
            for name, text in zip(names, texts):
                if not (folder / f"{name}.txt").exists():
                    partial = folder / f"{name}.txt.{os.getpid()}"
                    partial.write_text(text)
                    os.replace(partial, folder / f"{name}.txt")
            missing = [n for n in names if not (folder / f"{n}.so").exists()]
            if missing:
                log.info("compiling the ranker's %d boosters to machine code (once per machine, in the "
                         "background; LightGBM predicts meanwhile)", len(missing))
                subprocess.run([sys.executable, "-m", __name__, str(folder), *missing],
                               check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            fns = [load(folder, n) for n in names]
            x = probe(boosters[0].num_feature())
            for booster, fn in zip(boosters, fns):
                if not np.array_equal(booster.predict(x, raw_score=True, num_threads=1), fn(x)):
                    raise RuntimeError(f"its scores differ from LightGBM's; delete {folder} to compile again")
            ready(fns)
            prune(folder, names)
            log.info("the ranker predicts with its compiled boosters")
        except Exception as exc:  # noqa: BLE001  LightGBM keeps predicting: slower, never different
            log.warning("the ranker's boosters were not compiled (%s); LightGBM predicts them", exc)

    thread = threading.Thread(target=run, name="agentmemrec-compile", daemon=True)
    thread.start()
    return thread


if __name__ == "__main__":  # the child a server starts: python -m agentmemrec.ranking.compiled FOLDER NAME...
    compile_missing(Path(sys.argv[1]), sys.argv[2:])
