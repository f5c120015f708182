"""Every recipe once on a GPU, end to end, in about two minutes: the paths CPU tests cannot reach.

    python bench/gpu_check.py                  # on the device machine (cuda, bf16, compiled pre-training)
    python bench/gpu_check.py --device cpu     # the same steps on the CPU (fp32, no compile): a smoke test

Steps, each timed and reported as ok or its one-line error (a failure does not stop the later steps):
tokenizer on the bundled novels -> corpus (seq 128, dynamic masking) -> `pretrain --compile --precision bf16`
(one compiled graph, no graph break) with a checkpoint at step 20, then `--resume` from it (the re-logged losses
are compared: 0 on the CPU in fp32, small under bf16 and compile) -> `fill` on the GPU -> `finetune classify`
(bf16, dynamic padding, a new head) and `predict classify` -> the eager paths: `pretrain --no-compile --precision
fp16 --optimizer lamb --gradient-checkpointing` (GradScaler, LAMB's kernels, the MLM head's fixed slots, recomputed
layers) and `evaluate mlm` -> `finetune squad`, `ner` and `choice` on small sets made from the novels, each scored
on the GPU.
It checks that every path runs on the device, not model quality: the models are far too small for that.

Without `datasets` (the device image has none, and pyarrow may be missing too) the corpus step builds a stand-in:
bertctl's own shard builder makes the same instances, kept in memory instead of written as Arrow, and
`bertctl.corpus.load_corpus` (the one function that reads a corpus) is patched to hand them out, so pretrain,
resume and evaluate mlm still run the real code; the corpus step's detail says so. The other steps need neither
package.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bertctl.corpus
import bertctl.data.shards
from bertctl.config import CorpusConfig, FinetuneConfig, PretrainConfig, TokenizerTrainConfig
from bertctl.corpus import build_corpus
from bertctl.data.instances import Packed
from bertctl.data.masking import continuation_mask
from bertctl.data.shards import ShardBuilder, ShardJob, ShardSettings
from bertctl.data.sources import expand_inputs, iter_documents
from bertctl.fill import fill
from bertctl.finetune import finetune_classify
from bertctl.pretrain import pretrain
from bertctl.quickstart import bundled_text
from bertctl.tokenizer_folder import load_tokenizer
from bertctl.tokenizer_train import train_tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--keep", type=Path, default=None, help="work here instead of a temp folder")
    args = parser.parse_args()
    gpu = args.device.startswith("cuda")
    root = args.keep or Path(tempfile.mkdtemp(prefix="bertctl-gpu-check-"))
    text = str(bundled_text())
    pretrain_cfg = PretrainConfig(corpus=root / "corpus", out=root / "run", model_config="mini", steps=40,
                                  batch_size=128, lr=1e-3, warmup_steps=10, save_every=20, log_every=10,
                                  eval_every=0, compile=gpu, precision="bf16" if gpu else "fp32", device=args.device)
    steps: list[tuple[str, Callable[[], str]]] = [
        ("tokenizer", lambda: _tokenizer(text, root)),
        ("corpus", lambda: _corpus(text, root)),
        ("pretrain", lambda: _pretrain(pretrain_cfg)),
        ("resume", lambda: _resume(pretrain_cfg)),
        ("fill", lambda: _fill(root, args.device)),
        ("finetune", lambda: _finetune(root, args.device)),
        ("predict", lambda: _predict(root, args.device)),
        ("eager", lambda: _eager(pretrain_cfg, root)),
        ("squad", lambda: _squad(root, args.device)),
        ("ner", lambda: _ner(root, args.device)),
        ("choice", lambda: _choice(root, args.device)),
    ]
    print(f"{'step':10} {'result':6} {'seconds':>8}  detail")
    for name, step in steps:
        start = time.perf_counter()
        try:
            result, detail = "ok", step()
        except Exception as exc:  # report and go on: one device call should show every failure at once
            first = (str(exc).strip().splitlines() or [""])[0]
            result, detail = "FAIL", f"{type(exc).__name__}: {first[:150]}"
            traceback.print_exc(limit=-3)
        print(f"{name:10} {result:6} {time.perf_counter() - start:8.1f}  {detail}", flush=True)
    print(f"outputs in {root}")


def _tokenizer(text: str, root: Path) -> str:
    train_tokenizer(TokenizerTrainConfig(inputs=(text,), out=root / "tok", vocab_size=8192))
    return "8192 tokens"


def _corpus(text: str, root: Path) -> str:
    cfg = CorpusConfig(inputs=(text,), tokenizer=root / "tok", out=root / "corpus", max_seq_length=128,
                       masking="dynamic", validation_fraction=0.02)
    if not _has_datasets():
        return _stand_in_corpus(cfg)
    build_corpus(cfg)
    manifest = json.loads((root / "corpus" / "manifest.json").read_text())
    return f"{manifest['counts']['train']['instances']} instances"


def _losses(run: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row["loss"] for row in rows if "loss" in row}


def _pretrain(cfg: PretrainConfig) -> str:
    """A compiled run must build one graph, without a break: another graph is minutes of compiling mid-run, a
    break a hop through Python every step (TORCH_LOGS=graph_breaks,recompiles says where)."""
    from torch._dynamo.utils import counters

    graphs, breaks = counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())
    pretrain(cfg)
    graphs, breaks = counters["stats"]["unique_graphs"] - graphs, sum(counters["graph_break"].values()) - breaks
    if cfg.compile and (graphs, breaks) != (1, 0):
        raise AssertionError(f"compiled into {graphs} graphs with {breaks} graph breaks; want 1 graph, no break")
    losses = _losses(cfg.out)
    first, last = losses[min(losses)], losses[max(losses)]
    if not last < first:
        raise AssertionError(f"loss did not fall: {first:.3f} -> {last:.3f}")
    rate = json.loads((cfg.out / "metrics.jsonl").read_text().splitlines()[-1])["tokens_per_second"]
    return f"loss {first:.3f} -> {last:.3f}, {rate:,.0f} tokens/s, {graphs} compiled graph(s)"


def _resume(cfg: PretrainConfig) -> str:
    import dataclasses
    import shutil

    shutil.rmtree(cfg.out / "final")  # continue from step-20 as if the run had stopped there
    before = _losses(cfg.out)
    pretrain(dataclasses.replace(cfg, resume=True))
    after = _losses(cfg.out)
    gap = max(abs(before[s] - after[s]) for s in before if s > 20)
    return f"re-logged steps 30..40 differ from the first run's by at most {gap:.2e}"


def _fill(root: Path, device: str) -> str:
    [result] = fill(["she was [MASK] to see him."], root / "run" / "final", device=device)
    return " ".join(p.token for p in result.predictions[0])


def _finetune(root: Path, device: str) -> str:
    rows = _labelled_rows()
    for name, part in (("train.csv", rows[:800]), ("dev.csv", rows[800:1000])):
        with open(root / name, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["text", "label"])
            writer.writerows(part)
    out = root / "classify"
    finetune_classify(FinetuneConfig(model=root / "run" / "final", out=out, train=root / "train.csv",
                                     validation=root / "dev.csv", text_columns=("text",), epochs=2, lr=1e-4,
                                     device=device, overwrite=True))
    results = json.loads((out / "eval_results.json").read_text())
    return json.dumps({k: v for k, v in results.items() if isinstance(v, dict | float)})[:150]


def _predict(root: Path, device: str) -> str:
    from bertctl.predict import predict_classify

    predict_classify(root / "classify", root / "dev.csv", root / "predictions.csv", device=device, overwrite=True)
    with open(root / "predictions.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return f"{len(rows)} rows, columns {', '.join(rows[0])}"


def _eager(cfg: PretrainConfig, root: Path) -> str:
    """The eager step with what the compiled one leaves out: fp16's loss scaler, LAMB and recomputed layers (the MLM
    head reads its fixed slots uncompiled, as every CUDA run does; the sparse embedding gradient is the CPU's)."""
    import dataclasses

    from bertctl.mlm_eval import evaluate_mlm

    gpu = cfg.device.startswith("cuda")
    eager = dataclasses.replace(cfg, out=root / "eager", steps=12, batch_size=64, save_every=0, log_every=4,
                                compile=False, precision="fp16" if gpu else "fp32", optimizer="lamb",
                                gradient_checkpointing=True)
    pretrain(eager)
    losses = _losses(eager.out)
    if not all(loss == loss for loss in losses.values()):
        raise AssertionError(f"a logged loss is NaN: {losses}")
    scores = evaluate_mlm(eager.out / "final", cfg.corpus, samples=64, device=cfg.device)
    return f"losses {', '.join(f'{loss:.3f}' for loss in losses.values())}; mlm_loss {scores['mlm_loss']:.3f}"


def _squad(root: Path, device: str) -> str:
    """Questions on paragraphs of the novels: "which word follows W?", answered by the word after W."""
    import re

    from bertctl.finetune_qa import finetune_squad

    questions = []
    for number, paragraph in enumerate(_paragraphs()[:300]):
        words = list(re.finditer(r"[a-z]{4,}", paragraph))
        if len(words) < 6:
            continue
        cue, answer = words[len(words) // 2], words[len(words) // 2 + 1]
        questions.append({"context": paragraph, "qas": [{"id": str(number), "question": f"which word follows "
                          f"{cue.group()}?", "answers": [{"text": answer.group(), "answer_start": answer.start()}]}]})
    for name, part in (("squad-train.json", questions[:200]), ("squad-dev.json", questions[200:])):
        data = {"version": "1.1", "data": [{"title": "novels", "paragraphs": part}]}
        (root / name).write_text(json.dumps(data), encoding="utf-8")
    out = root / "squad"
    finetune_squad(FinetuneConfig.squad(model=root / "run" / "final", out=out, train=str(root / "squad-train.json"),
                                        validation=str(root / "squad-dev.json"), epochs=1, batch_size=16,
                                        max_seq_length=192, device=device, overwrite=True))
    return _scores(out)


def _ner(root: Path, device: str) -> str:
    """CoNLL sentences of the novels, capitalised words inside a sentence tagged as names (B-/I-PER)."""
    from bertctl.finetune_tagging import finetune_ner

    blocks = []
    for paragraph in _paragraphs()[:400]:
        words, tags = paragraph.split()[:40], []
        for i, word in enumerate(words):
            name = i > 0 and word[:1].isupper() and word.isalpha()
            tags.append(("I-PER" if tags and tags[-1] != "O" else "B-PER") if name else "O")
        blocks.append("\n".join(f"{word} {tag}" for word, tag in zip(words, tags, strict=True)))
    for name, part in (("ner-train.txt", blocks[:320]), ("ner-dev.txt", blocks[320:])):
        (root / name).write_text("\n\n".join(part) + "\n", encoding="utf-8")
    out = root / "ner"
    finetune_ner(FinetuneConfig.ner(model=root / "run" / "final", out=out, train=str(root / "ner-train.txt"),
                                    validation=str(root / "ner-dev.txt"), epochs=1, device=device, overwrite=True))
    return _scores(out)


def _choice(root: Path, device: str) -> str:
    """SWAG-style rows: a paragraph's first half, and its true second half among three others'."""
    from bertctl.finetune_multiple_choice import finetune_choice

    halves = [(p[: len(p) // 2], p[len(p) // 2:]) for p in _paragraphs()[:300]]
    header = ["video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source", "ending0", "ending1",
              "ending2", "ending3", "label"]
    rows = []
    for i, (start, end) in enumerate(halves):
        label = i % 4
        endings = [halves[(i + k + 1) % len(halves)][1] for k in range(3)]
        endings.insert(label, end)
        rows.append(["v", str(i), start, start, "", "gold", *endings, str(label)])
    for name, part in (("choice-train.csv", rows[:240]), ("choice-dev.csv", rows[240:])):
        with open(root / name, "w", newline="", encoding="utf-8") as handle:
            csv.writer(handle).writerows([header, *part])
    out = root / "choice"
    finetune_choice(FinetuneConfig.choice(model=root / "run" / "final", out=out, train=str(root / "choice-train.csv"),
                                          validation=str(root / "choice-dev.csv"), epochs=1, batch_size=16,
                                          device=device, overwrite=True))
    return _scores(out)


def _scores(out: Path) -> str:
    """A fine-tuning run's eval_results.json, cut to a table cell."""
    return json.dumps(json.loads((out / "eval_results.json").read_text()))[:150]


@functools.cache  # read once for the four steps that label its paragraphs
def _paragraphs() -> list[str]:
    import gzip

    with gzip.open(bundled_text(), "rt", encoding="utf-8") as handle:
        return [line.strip() for line in handle if 40 < len(line.strip()) < 400]


def _labelled_rows() -> list[tuple[str, str]]:
    """Paragraphs of the novels labelled by whether the word "she" occurs: learnable, and real text."""
    return [(p, "yes" if "she" in p.lower().split() else "no") for p in _paragraphs()[:1000]]


def _has_datasets() -> bool:
    try:
        import datasets  # noqa: F401  (whether it imports at all: it fails without pyarrow too)
    except ImportError:
        return False
    return True


_MANIFEST_SETTINGS = ("objective", "masking", "max_seq_length", "masked_lm_prob", "max_predictions_per_seq",
                      "whole_word_masking")  # what pretrain reads of a manifest, besides the tokenizer


def _stand_in_corpus(cfg: CorpusConfig) -> str:
    """The corpus without datasets/pyarrow: the real instances in memory, and load_corpus patched to return them."""
    out = Path(cfg.out)
    tokenizer = load_tokenizer(cfg.tokenizer)
    tokenizer.save(out / "tokenizer")  # pretrain checks the corpus's own tokenizer, as with a built corpus
    pipeline = out / "worker-tokenizer.json"
    pipeline.write_text(tokenizer.backend.to_str(), encoding="utf-8")
    settings = ShardSettings(cfg, str(pipeline), None, None, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id,
                             tokenizer.mask_id, continuation_mask(tokenizer.vocab()), str(out))
    packed: dict[str, Packed] = {}

    def keep(shard: Packed, schema: Any, path: Path) -> dict[str, Any]:
        packed[path.name.split("-")[0]] = shard  # the name is shard_file(split, shard)
        return {}

    documents = [lines for lines, _ in iter_documents(expand_inputs(list(cfg.inputs)))]
    written_by = bertctl.data.shards.write_shard
    bertctl.data.shards.write_shard = keep  # the builder's one Arrow write: the only pyarrow it needs
    try:
        counts = ShardBuilder(settings).build(ShardJob(0, 0, documents, 0, 0))  # one shard, as the real build's
    finally:
        bertctl.data.shards.write_shard = written_by
    manifest = {"stand_in": True, "tokenizer_sha256": tokenizer.sha256(), "counts": counts,
                **{name: getattr(cfg, name) for name in _MANIFEST_SETTINGS}}
    splits = {split: _PackedSplit(rows, cfg.objective) for split, rows in packed.items()}
    bertctl.corpus.load_corpus = lambda path: (splits, manifest)  # pretrain imports it from there at each call
    return f"stand-in (no datasets): {counts['train']['instances']} instances in memory, load_corpus patched"


class _PackedSplit:
    """What pretrain reads of a datasets split: its length, column names, and rows by a list of indices as
    columns of Python lists (datasets' default format)."""

    def __init__(self, packed: Packed, objective: str) -> None:
        self.packed = packed
        self.column_names = ["input_ids", "token_type_ids", *(["next_sentence_label"] if objective != "mlm" else [])]

    def __len__(self) -> int:
        return len(self.packed.offsets) - 1

    def __getitem__(self, rows: list[int]) -> dict[str, list]:
        p = self.packed
        spans = [slice(p.offsets[row], p.offsets[row + 1]) for row in rows]
        columns = {"input_ids": [p.input_ids[s].tolist() for s in spans],
                   "token_type_ids": [p.token_type_ids[s].tolist() for s in spans]}
        if "next_sentence_label" in self.column_names:
            columns["next_sentence_label"] = p.labels[rows].tolist()
        return columns


if __name__ == "__main__":
    main()
