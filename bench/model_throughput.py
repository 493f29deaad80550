"""Embedding and cross-encoder throughput for models of bge-m3's size, without its weights.

A randomly initialised XLM-RoBERTa large built from bge-m3's published configuration costs the
same as bge-m3 (and, with a one-logit head, as bge-reranker-v2-m3). It is exported with the
product's own install command and run through the product's ONNX code, on CPU or CUDA.

    python bench/model_throughput.py --device cpu --json bench-cpu.json
    python bench/model_throughput.py --device cuda --precision fp16 --units 256 --pairs 128 --json bench-gpu.json

Reported: embedding units/s (sequence length and batch stated), cross-encoder pairs/s and the
latency of scoring a pool of `--pairs` pairs, median of `--repeats` runs, each with the device and
precision the product chose for `--device`/`--precision` (the same spec as `serve --device`,
e.g. cuda:fp16); at FP16 also how far its output is from the FP32 file's on the same device.
all-MiniLM-L6-v2 runs alongside when its package is installed. Not a test: machines here are
shared, so read ratios, not absolutes. bench/gpu.sh runs the GPU measurement in one go.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

# bge-m3 / bge-reranker-v2-m3: XLM-RoBERTa large
BGE_M3 = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
              vocab_size=250_002, max_position_embeddings=8194, pad_token_id=1, bos_token_id=0,
              eos_token_id=2, type_vocab_size=1, layer_norm_eps=1e-5)


def build_random(directory: Path, head: str) -> None:
    """Random XLM-R large (embedding or one-logit classifier) with a word-level fast tokenizer
    whose every word is one token, so sequence lengths are exact."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import (
        PreTrainedTokenizerFast,
        XLMRobertaConfig,
        XLMRobertaForSequenceClassification,
        XLMRobertaModel,
    )
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, **{f"w{i}": i + 4 for i in range(1000)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                                   cls_token="<s>", pad_token="<pad>", unk_token="<unk>", model_max_length=8192)
    torch.manual_seed(0)
    config = XLMRobertaConfig(**BGE_M3, num_labels=1)
    model = XLMRobertaForSequenceClassification(config) if head == "reranker" else XLMRobertaModel(config)
    model.eval().save_pretrained(directory)
    fast.save_pretrained(directory)


def has_fp16_copy(model_dir: Path) -> bool:
    """False for a missing install and for one made before installs wrote an FP16 copy."""
    from agentmemrec.indexing.dense.models import read_manifest
    from agentmemrec.indexing.errors import StoreError
    try:
        return read_manifest(model_dir).fp16_file is not None
    except StoreError:
        return False


def ensure_installed(home: Path, role: str, max_length: int) -> Path:
    from agentmemrec.indexing.dense.install import install
    from agentmemrec.indexing.dense.models import models_dir
    name = f"xlmr-large-random-{role}"
    if not has_fp16_copy(models_dir(home) / name):
        source = home / "sources" / role
        if not (source / "config.json").exists():
            source.mkdir(parents=True, exist_ok=True)
            build_random(source, role)
        t0 = time.perf_counter()
        install(home, str(source), role, pooling="cls" if role == "embedder" else None,
                max_length=max_length, name=name)
        print(f"exported {name} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return models_dir(home) / name


def text_of(tokens: int, seed: int) -> str:
    return " ".join(f"w{(seed * 7 + i) % 1000}" for i in range(tokens))


def on_device(spec: str, device: str) -> None:
    """Stop, rather than time a large model for minutes on the CPU ONNX Runtime fell back to."""
    if spec.startswith("cuda") and device != "cuda":
        raise SystemExit(f"asked for {spec} but the session runs on {device}; see the log above")


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up: graph optimisation, CUDA context, memory arenas
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_embedder(model_dir: Path, spec: str, n: int, tokens: int, repeats: int) -> dict:
    import numpy as np

    from agentmemrec.indexing.dense.embedder import BATCH, OnnxEmbedder
    emb = OnnxEmbedder(model_dir, spec)
    on_device(spec, emb.device)
    texts = [text_of(tokens - 2, i) for i in range(n)]  # + <s> and </s>
    t = median_time(lambda: emb.embed(texts), repeats)
    out = {"model": emb.identity, "device": emb.device, "precision": emb.precision, "units": n,
           "tokens_per_unit": tokens, "batch": BATCH, "median_s": t, "units_per_s": n / t}
    if emb.precision == "fp16":  # the FP32 file on the same device, same texts
        reference = OnnxEmbedder(model_dir, f"{emb.device}:fp32").embed(texts[:BATCH])
        out["min_cosine_vs_fp32"] = float(np.min(np.sum(reference * emb.embed(texts[:BATCH]), axis=1)))
    return out


def bench_reranker(model_dir: Path, spec: str, pairs: int, tokens: int, repeats: int) -> dict:
    import numpy as np

    from agentmemrec.ranking.cross_encoder import BATCH, OnnxReranker
    rr = OnnxReranker(model_dir, spec, limit=pairs)
    on_device(spec, rr.device)
    query = text_of(14, 999)
    texts = [text_of(tokens - 20, i) for i in range(pairs)]  # pair = query + text + 4 specials
    t = median_time(lambda: rr.score(query, texts), repeats)
    out = {"model": rr.identity, "device": rr.device, "precision": rr.precision, "pairs": pairs,
           "tokens_per_pair": tokens, "batch": BATCH if rr.scoring == "batch" else 1,  # on CPU a pair a run
           "median_s": t, "pairs_per_s": pairs / t,
           "pool_latency_ms": 1000 * t}
    if rr.precision == "fp16":
        reference = OnnxReranker(model_dir, f"{rr.device}:fp32").score(query, texts[:BATCH])
        got = rr.score(query, texts[:BATCH])
        out["max_abs_logit_diff_vs_fp32"] = float(np.max(np.abs(got - reference)))
        out["logit_spread_fp32"] = float(np.ptp(reference))
    return out


def bench_minilm(home: Path, spec: str, n: int, repeats: int) -> dict | None:
    from agentmemrec.indexing.dense.install import install, resolve_source
    from agentmemrec.indexing.dense.models import models_dir
    source = resolve_source("all-MiniLM-L6-v2")
    if source == "all-MiniLM-L6-v2":
        return None
    if not has_fp16_copy(models_dir(home) / "minilm"):
        install(home, source, "embedder", name="minilm")
    return bench_embedder(models_dir(home) / "minilm", spec, n, 36, repeats)


def environment() -> dict:
    import onnxruntime as ort
    return {"onnxruntime": ort.__version__, "providers": ort.get_available_providers(),
            "python": platform.python_version(), "machine": platform.node()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "fp16"],
                   help="auto: FP16 on CUDA, FP32 on CPU (as the server chooses)")
    p.add_argument("--home", type=Path, default=Path.home() / ".cache" / "agentmemrec-bench")
    p.add_argument("--units", type=int, default=32, help="texts embedded per run")
    p.add_argument("--unit-tokens", type=int, default=256)
    p.add_argument("--pairs", type=int, default=16, help="pairs scored per run (a pool is 128)")
    p.add_argument("--pair-tokens", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", type=Path)
    p.add_argument("--no-minilm", action="store_true", help="skip all-MiniLM-L6-v2")
    args = p.parse_args(argv)
    spec = f"{args.device}:{args.precision}"
    results = {
        "command": "python bench/model_throughput.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "environment": environment(), "cpus": os.cpu_count(), "load_avg_start": os.getloadavg(),
        "bge_m3_size_embedder": bench_embedder(ensure_installed(args.home, "embedder", 512), spec,
                                               args.units, args.unit_tokens, args.repeats),
        "bge_reranker_v2_m3_size": bench_reranker(ensure_installed(args.home, "reranker", 512), spec,
                                                  args.pairs, args.pair_tokens, args.repeats),
        "all_minilm_l6_v2": None if args.no_minilm else bench_minilm(args.home, spec, 256, args.repeats),
    }
    results["load_avg_end"] = os.getloadavg()  # a shared machine: the figures move with its load
    text = json.dumps(results, indent=2)
    sys.stdout.write(text + "\n")
    if args.json:
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
