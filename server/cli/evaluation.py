"""`agentmemrec eval` and `train`: the product's own selection measured on benchmark files (LoCoMo,
LongMemEval, the coding-memory set), and the LambdaRank ranker trained on them."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
from pathlib import Path
from typing import Any, Callable

from agentmemrec.indexing.errors import InputError
from agentmemrec.ranking.candidates import DEFAULT_POOL
from agentmemrec.ranking.eval.options import DATASETS, DEFAULT_BUDGETS, VARIANT_NAMES
from agentmemrec.server.cli.common import at_least, device_arg, positive
from agentmemrec.server.console import emit
from agentmemrec.server.settings import Settings

log = logging.getLogger("agentmemrec")
# Fewer training questions than this make a ranker worse than the shipped ones: refused unless
# --allow-small (docs/ranker.md); below 2 nothing can be held out to stop early on.
MIN_TRAIN_QUESTIONS = 100
# What only the full variant uses: refused without it rather than silently ignored and recorded
FULL_ONLY = (("cv", "--cv"), ("ablation", "--ablation"), ("train_also", "--train-also"),
             ("ranker_model", "--ranker-model"))


def _folds(text: str) -> int:
    value = at_least(0)(text)
    if value == 1:
        raise argparse.ArgumentTypeError("must be at least 2 (or 0: no cross-validation), got 1")
    return value


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    p = sub.add_parser("eval", help="measure evidence selection on LoCoMo, LongMemEval or coding-memory files")
    p.add_argument("dataset", choices=DATASETS, help="the files' format")
    p.add_argument("paths", nargs="+", type=Path, help="benchmark files or directories of them")
    p.add_argument("--variant", action="append", help=f"pipeline variant (repeatable): "
                   f"{', '.join(VARIANT_NAMES)} (default: bm25)")
    p.add_argument("--budget", action="append", type=int, help="token budget (repeatable; "
                   "default 2400, 2550, 2700)")
    _pool_arg(p)
    p.add_argument("--limit", type=positive, default=None, help="evaluate a random sample of N questions")
    p.add_argument("--seed", type=int, action="append", default=None,
                   help="seed of the sample and of training (default 0); with --cv, repeat it to cross-validate "
                        "the same pools with each seed in turn, one result each (--json, --per-question and "
                        "--plot then name the file with {seed}, e.g. r-{seed}.json); the sample is the first's")
    p.add_argument("--json", type=Path, help="write one record per (variant, budget) here")
    p.add_argument("--per-question", type=Path,
                   help="write each question's evidence, its pool and final ranks, and slate hits (JSONL)")
    p.add_argument("--plot", type=Path, help="plot slate completeness against budget (PNG)")
    device_arg(p)
    _rerank_arg(p)
    p.add_argument("--hook-slates", action="store_true",
                   help="build slates as the Claude Code hook does: a decision that no channel matched "
                        "is left out (docs/clients.md, The Claude Code hooks)")
    p.add_argument("--no-cache", action="store_true",
                   help="do not reuse embeddings cached under $AGENTMEMREC_HOME/cache")
    p.add_argument("--ranker-model", type=Path, default=None,
                   help="ranker model file for the full variant (default: the shipped one)")
    p.add_argument("--cv", type=_folds, default=0, metavar="K",
                   help="with --variant full: cross-validate it, train on K-1 folds, rank the K-th (K >= 2)")
    p.add_argument("--ablation", nargs="*", default=None, metavar="GROUP",
                   help="with --cv: also the full variant without each feature group (or only the named "
                        "ones: relevance, context, question, coding, session, cross-encoder); session-pull "
                        "(named only, with or without --cv): also each variant's slates walked in rank order")
    _also_arg(p, "--train-also", "with --cv: also train every fold on another dataset, e.g. --train-also locomo DIR")

    p = sub.add_parser("train", help="train the LambdaRank ranker on benchmark data")
    p.add_argument("dataset", choices=DATASETS, help="the files' format")
    p.add_argument("paths", nargs="+", type=Path, help="benchmark files or directories of them")
    _also_arg(p, "--also", "another dataset and its paths, e.g. --also longmemeval DIR")
    p.add_argument("--out", type=Path, required=True, help="where to write the model file")
    _pool_arg(p)
    p.add_argument("--limit", type=positive, default=None, help="train on a random sample of N questions")
    p.add_argument("--allow-small", action="store_true",
                   help=f"train on fewer than {MIN_TRAIN_QUESTIONS} questions (the model is likely worse "
                        "than the shipped one)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample and of the boosters (default 0)")
    device_arg(p)
    _rerank_arg(p)
    return {"eval": cmd_eval, "train": cmd_train}


def _also_arg(p: argparse.ArgumentParser, flag: str, text: str) -> None:
    p.add_argument(flag, nargs="+", action="append", default=[], metavar="DATASET_OR_PATH", help=text)


def _sources(also: list[list[str]]) -> list[tuple[str, list[Path]]]:
    bad = [a[0] for a in also if a[0] not in DATASETS or len(a) < 2]
    if bad:
        raise InputError(f"each extra dataset is a format and its paths, e.g. 'longmemeval DIR'; got {bad} "
                         f"(formats: {', '.join(DATASETS)})")
    return [(a[0], [Path(p) for p in a[1:]]) for a in also]


def _groups(source: tuple[str, list[Path], list[Any]], args: argparse.Namespace, models: Any,
            limit: int | None = None) -> list[Any]:
    """Every question's pool and features from the product's pipeline, as training groups."""
    from agentmemrec.ranking.eval import evaluate as ev  # noqa: PLC0415
    from agentmemrec.ranking.eval.train import to_group  # noqa: PLC0415
    kept: list[Any] = []
    dataset, paths, cases = source
    ev.evaluate(dataset, paths, [], [2700], limit, args.seed, args.pool_size, None, models, kept.append, cases)
    return [to_group(k) for k in kept]


def _read(sources: list[tuple[str, list[Path]]]) -> list[tuple[str, list[Path], list[Any]]]:
    """Each source with its cases, read before any work: a file of another format, or one with no
    question, is refused before models load."""
    from agentmemrec.ranking.eval.benchmarks import read_questions  # noqa: PLC0415
    return [(dataset, paths, read_questions(dataset, paths)) for dataset, paths in sources]


def _asked(cases: list[Any], limit: int | None, seed: int) -> list[Any]:
    """The questions a run asks (the sample --limit draws)."""
    from agentmemrec.ranking.eval.evaluate import select_questions  # noqa: PLC0415
    chosen = select_questions(cases, limit, seed)
    return [(c, q) for c in cases for q in c.questions if q.qid in chosen]


def check_writable(path: Path | None, flag: str) -> None:
    """Refuse an output path before the work whose result it would hold: a missing folder or one
    this user cannot write is found out now, not after an hour of evaluation."""
    if path is None:
        return
    folder = path.parent
    if path.is_dir():
        raise InputError(f"{flag} {path} is a folder; give a file path")
    if not folder.is_dir():
        raise InputError(f"{flag} {path}: folder {folder} does not exist; create it or write elsewhere")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise InputError(f"{flag} {path}: cannot write there (permission denied); write elsewhere")


def _pool_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pool-size", type=at_least(0), default=DEFAULT_POOL,
                   help=f"candidates ranked (default {DEFAULT_POOL}; 0: the whole history)")


def _rerank_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rerank-depth", type=positive, default=None,
                   help="candidates (in pool order) the cross-encoder scores when training or cross-validating "
                        "(default: what the chosen ranker was trained with, else 32)")
    p.add_argument("--rerank-tokens", type=positive, default=None,
                   help="tokens a (query, unit) pair is cut to for the cross-encoder (default: as above, "
                        "else the model's maximum)")


SLATE_ABLATION = "session-pull"  # slates built without the session pull, from the same rankings


def _ablations() -> dict[str, list[str]]:
    from agentmemrec.ranking.features import GROUPS  # noqa: PLC0415
    return {**{name: [f.__name__ for f in feats] for name, feats in GROUPS.items()},
            "cross-encoder": ["cross_encoder_z"]}


def _check_full_options(args: argparse.Namespace, variants: list[str]) -> None:
    """The options only the full variant uses are refused without it (not run, and not recorded
    in a result file as if they had been), and checked before any work."""
    given = [flag for name, flag in FULL_ONLY if getattr(args, name) not in (None, 0, [], [SLATE_ABLATION])]
    if given and "full" not in variants:
        raise InputError(f"{', '.join(given)} apply to the full variant only; add --variant full "
                         f"(variants now: {', '.join(variants)})")
    if args.train_also and not args.cv:
        raise InputError("--train-also adds training data to cross-validation: use it with --variant full --cv K")
    if args.ablation is not None and not args.cv and args.ablation != [SLATE_ABLATION]:
        raise InputError("--ablation compares cross-validated models: use it with --variant full --cv K "
                         f"(only --ablation {SLATE_ABLATION} goes without)")
    unknown = sorted(set(args.ablation or ()) - set(_ablations()) - {SLATE_ABLATION})
    if unknown:
        raise InputError(f"unknown ablation {unknown}; use: {', '.join([*_ablations(), SLATE_ABLATION])}")


def _check_folds(args: argparse.Namespace, cases: list[Any]) -> None:
    """--cv K needs K groups to fold: conversations or projects (they stay whole), else questions."""
    by_case = args.dataset in ("locomo", "coding")
    keys = {(c.case_id, q.project) if by_case else q.qid for c, q in _asked(cases, args.limit, args.seed)}
    if len(keys) < args.cv:
        what = "conversations or projects" if by_case else "questions"
        raise InputError(f"--cv {args.cv} needs at least {args.cv} {what} to fold (each stays whole in one "
                         f"fold); these files hold {len(keys)}: lower --cv or add files")


def _seeds(args: argparse.Namespace) -> list[int]:
    """The seeds to cross-validate with (`args.seed` becomes the first, which draws the sample); with
    several, each output path names its file with {seed}, checked before any work."""
    seeds = args.seed or [0]
    args.seed = seeds[0]
    if len(seeds) > 1:
        if not args.cv:
            raise InputError("several --seed values cross-validate the same pools with each seed: add --cv K, "
                             "or give one --seed")
        if len(set(seeds)) < len(seeds):
            raise InputError(f"--seed repeats a value ({', '.join(map(str, seeds))}); give each seed once")
        for flag, path in (("--json", args.json), ("--per-question", args.per_question), ("--plot", args.plot)):
            if path is not None and "{seed}" not in str(path):
                raise InputError(f"{flag} {path} would hold the result of one seed of {len(seeds)}: put {{seed}} "
                                 f"in its name, e.g. {path.with_name(path.stem + '-{seed}' + path.suffix)}")
    return seeds


def _for_seed(path: Path | None, seed: int) -> Path | None:
    return None if path is None else Path(str(path).replace("{seed}", str(seed)))


def _cross_validated(args: argparse.Namespace, groups: list[Any], extra: list[Any], budgets: list[int],
                     per_q: list[dict[str, Any]] | None, seed: int) -> list[Any]:
    """The full variant (and the asked ablations) cross-validated with `seed`: its folds and boosters."""
    from agentmemrec.ranking.eval.train import cross_validate  # noqa: PLC0415
    by_case = args.dataset in ("locomo", "coding")  # conversations and projects stay whole
    full = cross_validate(groups, "full", budgets, args.cv, by_case, seed=seed, per_question=per_q, extra=extra,
                          matched_only=args.hook_slates, without_pull=SLATE_ABLATION in (args.ablation or ()))
    runs = [full] + ([full.twin] if full.twin is not None else [])
    ablations = _ablations()
    chosen = args.ablation or ([] if args.ablation is None else [n for n in ablations if n != "cross-encoder"])
    for name in (n for n in chosen if n != SLATE_ABLATION):
        runs.append(cross_validate(groups, f"full-no-{name}", budgets, args.cv, by_case, ablations[name],
                                   seed, extra=extra, matched_only=args.hook_slates))
    return runs


def _refuse_its_training_data(args: argparse.Namespace, variants: list[str], ranker_model: Any,
                              data: dict[str, Any]) -> None:
    """A model ranked on the questions it was trained on reports its fit, not its quality."""
    if "full" not in variants or args.cv:
        return
    name = ranker_model.meta["file"]
    trained = ranker_model.trained_on()
    if trained is None:
        log.warning("%s does not record the files it was trained on, so it cannot be told whether "
                    "these are among them; retrain it with 'agentmemrec train' to know", name)
        return
    seen = sorted(trained[f["sha256"]] for f in data["files"] if f["sha256"] in trained)
    if seen:
        raise InputError(f"{name} was trained on {len(seen)} of these files ({', '.join(seen[:4])}"
                         f"{', ...' if len(seen) > 4 else ''}), so --variant full on them measures "
                         "how well it fits its training data; add --cv K to train and rank on "
                         "separate folds, or evaluate data it was not trained on")


def _result(args: argparse.Namespace, models: Any, budgets: list[int], data: dict[str, Any],
            recs: list[dict[str, Any]], seed: int) -> dict[str, Any]:
    """A result file: the records and what produced them, so a table made of it can say how to
    measure it again (docs/generate.py)."""
    return {"command": "agentmemrec " + shlex.join(args.argv), "dataset": args.dataset,
            "pool_size": args.pool_size, "budgets": budgets, "cv": args.cv, "seed": seed,
            "limit": args.limit, "embedder": models.embedder.identity if models.embedder else None,
            "query_instruction": models.embedder.query_instruction if models.embedder else None,
            "reranker": models.reranker.identity if models.reranker else None,
            "rerank_depth": models.reranker.limit if models.reranker else 0,
            "rerank_tokens": models.reranker.max_tokens if models.reranker else None,
            "ranker": models.ranker_model.meta["file"] if models.ranker_model else None, "data": data,
            "records": recs}


def _check_plot(path: Path | None) -> None:
    if path is None:
        return
    check_writable(path, "--plot")
    try:
        import matplotlib  # noqa: F401, PLC0415
    except ImportError:
        raise InputError("--plot needs matplotlib: pip install 'agentmemrec[plot]'") from None


def _check_training_size(sources: list[Any], args: argparse.Namespace) -> int:
    asked = sum(len(_asked(cases, args.limit, args.seed)) for _, _, cases in sources)
    if asked < 2:
        raise InputError(f"train needs at least 2 questions (one to hold out to stop early); these files "
                         f"give {asked}{' with --limit' if args.limit else ''}")
    if asked < MIN_TRAIN_QUESTIONS and not args.allow_small:
        raise InputError(f"{asked} questions are too few to train a useful ranker (at least "
                         f"{MIN_TRAIN_QUESTIONS}): add data with --also DATASET PATHS (see docs/ranker.md), "
                         "or pass --allow-small to train anyway")
    return asked


def cmd_train(args: argparse.Namespace) -> int:
    from agentmemrec.indexing.dense.embedder import ranker_identity  # noqa: PLC0415
    from agentmemrec.ranking.eval import evaluate as ev  # noqa: PLC0415
    from agentmemrec.ranking.eval.benchmarks import fingerprint  # noqa: PLC0415
    from agentmemrec.ranking.eval.train import train_model, usable  # noqa: PLC0415
    check_writable(args.out, "--out")
    sources = _read([(args.dataset, args.paths)] + _sources(args.also))
    _check_training_size(sources, args)
    home = Settings.load().home
    models = ev.load_models(home, [], args.device, True, None, args.rerank_depth, args.rerank_tokens,
                            training=True)
    groups = [g for source in sources for g in _groups(source, args, models, args.limit)]
    trainable = usable(groups)
    if len(trainable) < 2:
        raise InputError(f"only {len(trainable)} of {len(groups)} questions have evidence and another candidate "
                         "in their pool, and training needs 2; nothing was written: add questions or raise "
                         "--pool-size")
    model = train_model(groups, [fingerprint(d, p) for d, p, _ in sources],
                        ranker_identity(models.embedder), models.reranker, args.seed)
    model.save(args.out)
    strength = "fitted" if model.meta.get("strength") else "not fitted (no unanswerable questions)"
    metrics = model.meta["metrics"]
    valid = ", ".join(f"{name} {float(value):.4f}" for name, value in metrics["valid"].items())
    emit(f"trained on {len(groups)} questions; best iteration {metrics['best_iteration']}, "
         f"validation {valid}; evidence strength {strength}; written to {args.out}")
    if len(groups) < MIN_TRAIN_QUESTIONS or not any(float(v) for v in metrics["valid"].values()):
        log.warning("%s is trained on %d questions and its validation scores are what a handful of held-out "
                    "questions give: it likely ranks worse than the shipped ranker; measure it with 'agentmemrec "
                    "eval ... --variant full --ranker-model %s' on other data before serving with it",
                    args.out, len(groups), args.out)
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from agentmemrec.ranking.eval import evaluate as ev  # noqa: PLC0415
    from agentmemrec.ranking.eval.benchmarks import fingerprint  # noqa: PLC0415
    budgets = args.budget or list(DEFAULT_BUDGETS)
    bad = [b for b in budgets if not 200 <= b <= 200_000]
    if bad:
        raise InputError(f"budgets must lie in [200, 200000]; got {bad}")
    variants = ev.check_variants(args.variant or ["bm25"])
    _check_full_options(args, variants)
    seeds = _seeds(args)
    for seed in seeds:
        for path, flag in ((args.json, "--json"), (args.per_question, "--per-question")):
            check_writable(_for_seed(path, seed), flag)
        _check_plot(_for_seed(args.plot, seed))
    [(_, _, cases)] = _read([(args.dataset, args.paths)])
    also = _read(_sources(args.train_also))
    if args.cv:
        _check_folds(args, cases)
    cv = bool(args.cv)
    per_q: list[dict[str, Any]] | None = [] if args.per_question else None
    data = fingerprint(args.dataset, args.paths)
    models = ev.load_models(Settings.load().home, variants, args.device, not args.no_cache, args.ranker_model,
                            args.rerank_depth, args.rerank_tokens, training=cv)
    _refuse_its_training_data(args, variants, models.ranker_model, data)
    if models.ranker_note and not cv:
        emit(f"note: {models.ranker_note}")
    kept: list[Any] = []
    runs, cost = ev.evaluate(args.dataset, args.paths, [v for v in variants if not (cv and v == "full")],
                             budgets, args.limit, args.seed, args.pool_size, per_q, models,
                             kept.append if cv else None, cases, args.hook_slates,
                             SLATE_ABLATION in (args.ablation or ()))
    emit(f"dataset {args.dataset}: {cost['ingest_units']} units ingested in {cost['ingest_s']:.1f} s, "
         f"{cost['embed_units']} embedded in {cost['embed_s']:.1f} s")
    if cv:  # the pools and features once, every seed's folds and boosters over them
        from agentmemrec.ranking.eval.train import to_group  # noqa: PLC0415
        groups, extra = [to_group(k) for k in kept], [g for source in also for g in _groups(source, args, models)]
    for seed in seeds:
        seed_q = None if per_q is None else list(per_q)
        recs = ev.records(args.dataset, runs + (_cross_validated(args, groups, extra, budgets, seed_q, seed)
                                                if cv else []), cost)
        emit((f"seed {seed}:\n" if len(seeds) > 1 else "") + ev.format_table(recs))
        if args.json:
            _for_seed(args.json, seed).write_text(json.dumps(_result(args, models, budgets, data, recs, seed),
                                                             indent=2) + "\n")
        if seed_q is not None:
            _for_seed(args.per_question, seed).write_text("".join(json.dumps(r) + "\n" for r in seed_q))
        if args.plot:
            ev.plot(recs, _for_seed(args.plot, seed))
    return 0
