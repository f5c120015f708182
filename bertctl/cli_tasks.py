"""The fine-tuning command groups: `bertctl finetune`, `evaluate` and `predict`, for GLUE, own tables, SQuAD, NER,
multiple choice (SWAG).

Thin typer wrappers like the rest of the CLI: heavy modules are imported inside the command bodies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from bertctl.cli_base import PATH_METAVAR, command_config, command_group, path_option, shared_options

finetune_app = command_group("Fine-tune a model on GLUE, on your own labelled data, on SQuAD, for NER, or "
                              "for multiple choice (SWAG).")
evaluate_app = command_group("Score a fine-tuned model on a GLUE dev set, a labelled table, SQuAD, NER or multiple-"
                              "choice data, or a pre-trained model's masked-LM on a corpus.")
predict_app = command_group("Write predictions: GLUE submission files, one row per row of a table, SQuAD "
                            "answers, NER tags, or the picked choice.")

# Data flags that may name a hub dataset are str, not Path: Path("./x/y") is `x/y`, which reads like a hub id, so the
# text as given decides (`bertctl.hub.written_like_path`); they show the metavar a Path flag does.
_PATH = PATH_METAVAR

# Options of every `finetune` command (`_training_options`); None falls through to the --config file, then to
# the task's defaults (shown in brackets: FinetuneConfig's, where a task's differ its own alias says so).
_FtModel = Annotated[str | None, typer.Option("--model", "-m", help="Any model folder bertctl reads "
                                               "(pre-training run, transformers folder, bare encoder).")]
_FtOut = Annotated[Path | None, path_option("--out", "-o", help="Run folder: best model, eval_results.json, "
                                             "run.json, metrics.jsonl.")]
_FtSeeds = Annotated[str | None, typer.Option(help="Comma-separated seeds, one run each: 1,2,3,4,5 [42].")]
_FtMaxLen = Annotated[int | None, typer.Option(help="Tokens per example, longer ones cut [128].")]
_FtBatch = Annotated[int | None, typer.Option(help="Examples per optimizer step [32].")]
_FtMicro = Annotated[int | None, typer.Option(help="Examples per forward pass (gradient accumulation) "
                                              "[batch size].")]
_FtEvalBatch = Annotated[int | None, typer.Option(help="Examples per forward pass when scoring [128].")]
_FtLr = Annotated[float | None, typer.Option(help="Peak learning rate [2e-5].")]
_FtEpochs = Annotated[int | None, typer.Option(help="Passes over the training data [3].")]
_FtWarmup = Annotated[float | None, typer.Option(help="Share of steps in linear warmup [0.1].")]
_FtSchedule = Annotated[str | None, typer.Option(help="linear|cosine|constant [linear].")]
_FtDecay = Annotated[float | None, typer.Option(help="AdamW weight decay [0.01].")]
_FtBeta1 = Annotated[float | None, typer.Option(help="AdamW beta1 [0.9].")]
_FtBeta2 = Annotated[float | None, typer.Option(help="AdamW beta2 [0.999].")]
_FtEps = Annotated[float | None, typer.Option(help="AdamW epsilon [1e-6].")]
_FtClip = Annotated[float | None, typer.Option(help="Max gradient norm, 0 = off [1.0].")]
_FtDropout = Annotated[float | None, typer.Option(help="Hidden, attention and classifier dropout [0.1].")]
_FtGroup = Annotated[bool | None, typer.Option("--group-by-length/--no-group-by-length",
                                               help="Batch examples of similar length together [off].")]
_FtCheckpointing = Annotated[bool | None, typer.Option(
    "--gradient-checkpointing/--no-gradient-checkpointing",
    help="Recompute each layer in the backward pass: less memory, ~1/3 more compute, same numbers [off].")]
_FtPrecision = Annotated[str | None, typer.Option(help="fp32|bf16|fp16|auto [auto: bf16 on Ampere+ GPUs].")]
_FtDevice = Annotated[str | None, typer.Option(help="cpu|cuda|cuda:N [cuda when available].")]
_FtLogEvery = Annotated[int | None, typer.Option(help="Steps between metrics.jsonl rows [50].")]
_FtMaxBad = Annotated[int | None, typer.Option(help="NaN/inf steps in a row before stopping [5].")]
_FtSaveEvery = Annotated[int | None, typer.Option(help="Steps between resumable checkpoints; 0: only on "
                                                  "SIGINT/SIGTERM [0].")]
_FtResume = Annotated[bool | None, typer.Option("--resume/--no-resume", help="Continue the unfinished run of "
                                                "--out from its newest checkpoint.")]
_FtOverwrite = Annotated[bool | None, typer.Option("--overwrite/--no-overwrite", help="Replace --out (and an "
                                                   "unfinished run of it).")]
_FtConfig = Annotated[Path | None, path_option("--config", help="YAML/JSON file of these fields (flags win).")]


def _training_options(
    model: _FtModel = None, out: _FtOut = None, seeds: _FtSeeds = None, max_seq_length: _FtMaxLen = None,
    batch_size: _FtBatch = None, micro_batch_size: _FtMicro = None, eval_batch_size: _FtEvalBatch = None,
    lr: _FtLr = None, epochs: _FtEpochs = None, warmup_fraction: _FtWarmup = None, schedule: _FtSchedule = None,
    weight_decay: _FtDecay = None, adam_beta1: _FtBeta1 = None, adam_beta2: _FtBeta2 = None,
    adam_eps: _FtEps = None, clip: _FtClip = None, dropout: _FtDropout = None, group_by_length: _FtGroup = None,
    gradient_checkpointing: _FtCheckpointing = None, precision: _FtPrecision = None, device: _FtDevice = None,
    log_every: _FtLogEvery = None, save_every: _FtSaveEvery = None, max_bad_steps: _FtMaxBad = None,
    resume: _FtResume = None, overwrite: _FtOverwrite = None, config: _FtConfig = None,
) -> None:
    """The options every `finetune` command takes, in their --help order (`shared_options` gives them)."""


def _finetune_config(flags: dict[str, Any], task: str = "") -> Any:
    """The run's FinetuneConfig: the flags over the --config file over the task's own defaults (squad: google-
    research/bert's, ner and choice: transformers' run_ner.py's and run_swag.py's) over FinetuneConfig's. The
    config splits --seeds 1,2, as it splits a file's string."""
    from bertctl import config

    defaults = {"squad": config.SQUAD_DEFAULTS, "ner": config.NER_DEFAULTS, "choice": config.CHOICE_DEFAULTS}
    return command_config(config.FinetuneConfig, flags, defaults.get(task))


@finetune_app.command("glue")
@shared_options(_training_options)
def finetune_glue(
    task: Annotated[str | None, typer.Argument(help="cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli, or all "
                                               "[the --config file's task].")] = None,
    data: Annotated[str | None, typer.Option(help="GLUE download folder (CoLA/, SST-2/, ...) or nyu-mll/glue.")
                    ] = None,
    **shared: Any,
) -> None:
    """Fine-tune on a GLUE task (best dev epoch kept in --out); `all` runs every task into OUT/<task>."""
    cfg = _finetune_config(locals())
    from bertctl.finetune import finetune_glue as run_finetune_glue

    run_finetune_glue(cfg)


@finetune_app.command("classify")
@shared_options(_training_options)
def finetune_classify(
    train: Annotated[Path | None, path_option(help="Training file: .csv, .tsv, .jsonl or .parquet, or a "
                                               "save_to_disk folder.")] = None,
    validation: Annotated[Path | None, path_option(help="File scored after each epoch (best kept).")] = None,
    text_columns: Annotated[str | None, typer.Option(help="Text column, or two comma-separated (a pair).")
                            ] = None,
    label_column: Annotated[str | None, typer.Option(help="Label column [label].")] = None,
    problem: Annotated[str | None, typer.Option(help="auto|classification|regression [auto].")] = None,
    label_names: Annotated[str | None, typer.Option(help="Comma-separated class names in head order "
                                                    "[sorted training labels].")] = None,
    **shared: Any,
) -> None:
    """Fine-tune on your own labelled table (classification or regression)."""
    cfg = _finetune_config(locals())
    from bertctl.finetune import finetune_classify as run_finetune_classify

    run_finetune_classify(cfg)


# `finetune squad` options whose defaults are google-research/bert's SQuAD ones (SQUAD_DEFAULTS), or new.
_SqMaxLen = Annotated[int | None, typer.Option(help="Tokens per window: [CLS] question [SEP] context [SEP] [384].")]
_SqLr = Annotated[float | None, typer.Option(help="Peak learning rate [3e-5].")]
_SqEpochs = Annotated[int | None, typer.Option(help="Passes over the training windows [2].")]
_SqStride = Annotated[int | None, typer.Option(help="Pieces between the starts of a long context's windows "
                                               "[128].")]
_SqQuery = Annotated[int | None, typer.Option(help="Question pieces kept, the rest cut [64].")]
_SqNBest = Annotated[int | None, typer.Option(help="Start/end candidates per window and answers in "
                                              "nbest_predictions.json [20].")]
_SqAnswerLen = Annotated[int | None, typer.Option(help="Longest answer, in pieces [30].")]
_SqThreshold = Annotated[float | None, typer.Option(help="SQuAD 2.0: answer \"\" when the no-answer score beats "
                                                    "the best span by more than this [0.0].")]


@finetune_app.command("squad")
@shared_options(_training_options)
def finetune_squad(
    train: Annotated[str | None, typer.Option(metavar=_PATH, help="SQuAD v1.1/v2.0 training JSON (train-v1.1.json), "
                                               "a hub copy (.parquet, save_to_disk folder, to_json lines) or a hub id "
                                               "NAME[:SPLIT] (rajpurkar/squad; split train).")] = None,
    validation: Annotated[str | None, typer.Option(metavar=_PATH, help="SQuAD JSON, hub copy or hub id (split "
                                                    "validation) scored after each epoch (best F1 kept).")] = None,
    max_seq_length: _SqMaxLen = None, doc_stride: _SqStride = None, max_query_length: _SqQuery = None,
    n_best_size: _SqNBest = None, max_answer_length: _SqAnswerLen = None,
    null_score_diff_threshold: _SqThreshold = None, lr: _SqLr = None, epochs: _SqEpochs = None, **shared: Any,
) -> None:
    """Fine-tune for extractive question answering on SQuAD v1.1 or v2.0 (run_squad.py's recipe)."""
    cfg = _finetune_config(locals(), "squad")
    from bertctl.finetune_qa import finetune_squad as run_finetune_squad

    run_finetune_squad(cfg)


# Options of `evaluate` and `predict`; by default the fine-tuning run's settings (its run.json).
_EvModel = Annotated[str, typer.Option("--model", "-m", help="Fine-tuned model folder (multi-seed run: best seed).")]
_EvGlueData = Annotated[str, typer.Option("--data", help="GLUE download folder or nyu-mll/glue.")]
_EvTable = Annotated[Path, path_option(help="A .csv, .tsv, .jsonl or .parquet file with a header (or keys), or a "
                                                "save_to_disk folder.")]
_EvColumns = Annotated[str | None, typer.Option(help="Text column, or two comma-separated [the run's].")]
_EvJson = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
_EvBatch = Annotated[int | None, typer.Option(help="Examples per forward pass [the run's, 128].")]
_EvMaxLen = Annotated[int | None, typer.Option(help="Tokens per example [the run's, 128].")]
_EvPrecision = Annotated[str | None, typer.Option(help="fp32|bf16|fp16|auto [the run's on the same kind of "
                                                  "device, else auto].")]
_EvOverwrite = Annotated[bool, typer.Option("--overwrite", help="Replace existing output files.")]


@evaluate_app.command("glue")
def evaluate_glue(
    task: Annotated[str, typer.Argument(help="A GLUE task: cola, sst2, ..., mnli (matched and mismatched).")],
    model: _EvModel, data: _EvGlueData,
    split: Annotated[str, typer.Option(help="dev (MNLI: dev_matched and dev_mismatched), or one split.")] = "dev",
    as_json: _EvJson = False, batch_size: _EvBatch = None, max_seq_length: _EvMaxLen = None,
    device: _FtDevice = None, precision: _EvPrecision = None,
) -> None:
    """Score a fine-tuned model on a GLUE task's dev set: the numbers of its eval_results.json."""
    from bertctl.evaluate import evaluate_glue as run_evaluate
    from bertctl.evaluate import print_results

    results = run_evaluate(task, model, data, split, batch_size, max_seq_length, device, precision)
    print_results(task, results, as_json=as_json)


@evaluate_app.command("classify")
def evaluate_classify(
    model: _EvModel, data: _EvTable, text_columns: _EvColumns = None,
    label_column: Annotated[str | None, typer.Option(help="Label column [the run's].")] = None,
    as_json: _EvJson = False, batch_size: _EvBatch = None, max_seq_length: _EvMaxLen = None,
    device: _FtDevice = None, precision: _EvPrecision = None,
) -> None:
    """Score a `finetune classify` model on a labelled table, with the metrics the run reported."""
    from bertctl.evaluate import evaluate_classify as run_evaluate
    from bertctl.evaluate import print_classify_results

    metrics = run_evaluate(model, data, text_columns, label_column, batch_size, max_seq_length, device, precision)
    print_classify_results(data, metrics, as_json=as_json)


# Options of `evaluate squad` and `predict squad`: by default the fine-tuning run's, else SQuAD's defaults.
_SqData = Annotated[str, typer.Option("--data", metavar=_PATH, help="SQuAD v1.1/v2.0 JSON (dev-v1.1.json), a hub "
                                       "copy (.parquet, save_to_disk folder, to_json lines) or a hub id NAME[:SPLIT] "
                                       "(rajpurkar/squad_v2; split validation); the version is read from it.")]
_SqEvMaxLen = Annotated[int | None, typer.Option(help="Tokens per window [the run's, 384].")]
_SqEvStride = Annotated[int | None, typer.Option(help="Pieces between windows [the run's, 128].")]
_SqEvQuery = Annotated[int | None, typer.Option(help="Question pieces kept [the run's, 64].")]
_SqEvNBest = Annotated[int | None, typer.Option(help="Candidates per window / answers kept [the run's, 20].")]
_SqEvAnswerLen = Annotated[int | None, typer.Option(help="Longest answer in pieces [the run's, 30].")]
_SqEvThreshold = Annotated[float | None, typer.Option(help="SQuAD 2.0 no-answer threshold [the run's, 0.0].")]


@evaluate_app.command("squad")
def evaluate_squad(
    model: _EvModel, data: _SqData, as_json: _EvJson = False, batch_size: _EvBatch = None,
    max_seq_length: _SqEvMaxLen = None, doc_stride: _SqEvStride = None, max_query_length: _SqEvQuery = None,
    n_best_size: _SqEvNBest = None, max_answer_length: _SqEvAnswerLen = None,
    null_score_diff_threshold: _SqEvThreshold = None, device: _FtDevice = None, precision: _EvPrecision = None,
) -> None:
    """Score a question-answering model on SQuAD JSON: the official v1.1/v2.0 script's numbers."""
    from bertctl.squad import evaluate_squad as run_evaluate
    from bertctl.squad import print_squad_results

    results = run_evaluate(model, data, batch_size, max_seq_length, doc_stride, max_query_length, n_best_size,
                           max_answer_length, null_score_diff_threshold, device, precision)
    print_squad_results(data, results, as_json=as_json)


@evaluate_app.command("mlm")
def evaluate_mlm(
    model: Annotated[str, typer.Option("--model", "-m", help="Pre-trained model with its MLM head: a pretrain "
                                       "run's final/ or step-N/, a transformers folder, a hub id.")],
    corpus: Annotated[Path, path_option(help="Corpus folder (corpus build or import) made with the model's "
                                         "tokenizer.")],
    split: Annotated[str, typer.Option(help="validation|train [validation].", show_default=False)] = "validation",
    samples: Annotated[int | None, typer.Option(help="Score the split's first N rows; 0: all of them [10000, "
                                                "pretrain's --eval-samples].")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Sequences per forward pass [32].")] = None,
    seed: Annotated[int | None, typer.Option(help="Draw of a dynamic corpus's masks, as pretrain's --seed "
                                             "draws its validation masks [42].")] = None,
    precision: Annotated[str | None, typer.Option(help="fp32|bf16|fp16|auto [auto: bf16 on Ampere+ GPUs].")] = None,
    device: _FtDevice = None, as_json: _EvJson = False,
) -> None:
    """Score a pre-trained model's masked LM (and NSP/SOP) on a corpus: pretrain's validation figures."""
    from bertctl.mlm_eval import evaluate_mlm as run_evaluate
    from bertctl.mlm_eval import print_mlm_results

    result = run_evaluate(model, corpus, split, samples, batch_size, seed, device, precision)
    print_mlm_results(model, corpus, result, as_json=as_json)


@predict_app.command("glue")
def predict_glue(
    task: Annotated[str, typer.Argument(help="A GLUE task (ax: with an MNLI model), or all.")],
    model: Annotated[str, typer.Option("--model", "-m", help="Model fine-tuned on the task; for all, the "
                                       "`finetune glue all` folder.")],
    data: _EvGlueData, out: Annotated[Path, path_option("--out", "-o", help="Folder for the submission files.")],
    batch_size: _EvBatch = None, max_seq_length: _EvMaxLen = None, device: _FtDevice = None,
    precision: _EvPrecision = None, overwrite: _EvOverwrite = False,
) -> None:
    """Write test-set predictions as GLUE submission files (CoLA.tsv, MNLI-m.tsv, AX.tsv, ...)."""
    from bertctl.predict import predict_glue as run_predict

    for path in run_predict(task, model, data, out, batch_size, max_seq_length, device, precision, overwrite):
        typer.echo(str(path))


@predict_app.command("classify")
def predict_classify(
    model: _EvModel, data: _EvTable,
    out: Annotated[Path, path_option("--out", "-o", help="Predictions file, .csv or .jsonl [.csv].")],
    text_columns: _EvColumns = None, batch_size: _EvBatch = None, max_seq_length: _EvMaxLen = None,
    device: _FtDevice = None, precision: _EvPrecision = None, overwrite: _EvOverwrite = False,
) -> None:
    """Predict every row of a table with a `finetune classify` model: id, label, class probabilities."""
    from bertctl.predict import predict_classify as run_predict

    written = run_predict(model, data, out, text_columns, batch_size, max_seq_length, device, precision, overwrite)
    typer.echo(str(written))


@predict_app.command("squad")
def predict_squad(
    model: _EvModel, data: _SqData,
    out: Annotated[Path, path_option("--out", "-o", help="Folder for predictions.json, nbest_predictions.json "
                                      "(and null_odds.json for SQuAD 2.0).")],
    batch_size: _EvBatch = None, max_seq_length: _SqEvMaxLen = None, doc_stride: _SqEvStride = None,
    max_query_length: _SqEvQuery = None, n_best_size: _SqEvNBest = None, max_answer_length: _SqEvAnswerLen = None,
    null_score_diff_threshold: _SqEvThreshold = None, device: _FtDevice = None, precision: _EvPrecision = None,
    overwrite: _EvOverwrite = False,
) -> None:
    """Answer every question of a SQuAD JSON file, writing run_squad.py's prediction files."""
    from bertctl.squad import predict_squad as run_predict

    for path in run_predict(model, data, out, batch_size, max_seq_length, doc_stride, max_query_length,
                            n_best_size, max_answer_length, null_score_diff_threshold, device, precision,
                            overwrite):
        typer.echo(str(path))


# `finetune ner`: run_ner.py's learning rate (NER_DEFAULTS) under the --config file, the flags over both.
_Lr5e5 = Annotated[float | None, typer.Option(help="Peak learning rate [5e-5].")]
_NerLabels = Annotated[str | None, typer.Option(help="Comma-separated tags in head order; names a .jsonl/.json "
                                                "file's integer ner_tags [a hub copy's ClassLabel names, else "
                                                "the sorted training tags].")]


@finetune_app.command("ner")
@shared_options(_training_options)
def finetune_ner(
    train: Annotated[str | None, typer.Option(metavar=_PATH, help="CoNLL-2003 text file (word first, NER tag "
                                               "last), .jsonl/.json ({\"tokens\", \"ner_tags\"}), a hub copy "
                                               "(.parquet, save_to_disk folder) or a hub id NAME[:SPLIT] "
                                               "(eriktks/conll2003; split train).")] = None,
    validation: Annotated[str | None, typer.Option(metavar=_PATH, help="File, hub copy or hub id (split "
                                                    "validation) scored after each epoch (best entity F1 kept).")
                          ] = None,
    label_names: _NerLabels = None,
    lr: _Lr5e5 = None, **shared: Any,
) -> None:
    """Fine-tune for named-entity recognition (run_ner.py's recipe; tag on each word's first piece)."""
    cfg = _finetune_config(locals(), "ner")
    from bertctl.finetune_tagging import finetune_ner as run_finetune_ner

    run_finetune_ner(cfg)


# Options of `evaluate ner` and `predict ner`: by default the fine-tuning run's.
_NerData = Annotated[str, typer.Option("--data", metavar=_PATH, help="CoNLL-2003 text file, .jsonl/.json, a hub "
                                        "copy (.parquet, save_to_disk folder) or a hub id NAME[:SPLIT] "
                                        "(eriktks/conll2003; split validation); tags needed to evaluate, optional to "
                                        "predict.")]
_NerEvLabels = Annotated[str | None, typer.Option(help="Tags of a .jsonl/.json file's integer ner_tags, in id order "
                                                  "[the run's, else the model's id2label].")]


@evaluate_app.command("ner")
def evaluate_ner(
    model: _EvModel, data: _NerData, as_json: _EvJson = False, batch_size: _EvBatch = None,
    max_seq_length: _EvMaxLen = None, label_names: _NerEvLabels = None, device: _FtDevice = None,
    precision: _EvPrecision = None,
) -> None:
    """Score a NER model: seqeval's entity precision/recall/F1, tag accuracy, and figures per entity type."""
    from bertctl.ner import evaluate_ner as run_evaluate
    from bertctl.ner import print_ner_results

    results = run_evaluate(model, data, batch_size, max_seq_length, label_names, device, precision)
    print_ner_results(data, results, as_json=as_json)


@predict_app.command("ner")
def predict_ner(
    model: _EvModel, data: _NerData,
    out: Annotated[Path, path_option("--out", "-o", help="Predictions: CoNLL text (word, [gold tag,] predicted "
                                      "tag), or .jsonl by its name; no extension: .txt.")],
    batch_size: _EvBatch = None, max_seq_length: _EvMaxLen = None, label_names: _NerEvLabels = None,
    device: _FtDevice = None, precision: _EvPrecision = None, overwrite: _EvOverwrite = False,
) -> None:
    """Tag every word of a CoNLL file, .jsonl file or hub copy with a NER model."""
    from bertctl.ner import predict_ner as run_predict

    typer.echo(str(run_predict(model, data, out, batch_size, max_seq_length, label_names, device, precision,
                               overwrite)))


# `finetune choice`: run_swag.py's learning rate and batch (CHOICE_DEFAULTS) under the --config file, the flags
# over both.
_ChoiceBatch = Annotated[int | None, typer.Option(help="Examples (each of all its choices) per optimizer step [16].")]


@finetune_app.command("choice")
@shared_options(_training_options)
def finetune_choice(
    train: Annotated[str | None, typer.Option(metavar=_PATH, help="SWAG-style .csv (sent1, sent2, ending0.., "
                                               "label), .jsonl ({\"context\", \"choices\", \"label\"}), a hub "
                                               "copy (.parquet, save_to_disk folder, to_json lines) or a hub id "
                                               "NAME[:SPLIT] (allenai/swag, config regular; split train).")] = None,
    validation: Annotated[str | None, typer.Option(metavar=_PATH, help="File, hub copy or hub id (split "
                                                    "validation) scored after each epoch (best accuracy kept).")
                          ] = None,
    batch_size: _ChoiceBatch = None, lr: _Lr5e5 = None, **shared: Any,
) -> None:
    """Fine-tune for multiple choice, as on SWAG (run_swag.py's recipe; softmax over the choices' [CLS] scores)."""
    cfg = _finetune_config(locals(), "choice")
    from bertctl.finetune_multiple_choice import finetune_choice as run_finetune_choice

    run_finetune_choice(cfg)


# Options of `evaluate choice` and `predict choice`: by default the fine-tuning run's.
_ChoiceData = Annotated[str, typer.Option("--data", metavar=_PATH, help="SWAG-style .csv, .jsonl, a hub copy "
                                           "(.parquet, save_to_disk folder, to_json lines) or a hub id NAME[:SPLIT] "
                                           "(allenai/swag:test; split validation); labels needed to evaluate, "
                                           "optional to predict.")]


@evaluate_app.command("choice")
def evaluate_choice(
    model: _EvModel, data: _ChoiceData, as_json: _EvJson = False, batch_size: _EvBatch = None,
    max_seq_length: _EvMaxLen = None, device: _FtDevice = None, precision: _EvPrecision = None,
) -> None:
    """Score a multiple-choice model: accuracy."""
    from bertctl.choice import evaluate_choice as run_evaluate
    from bertctl.choice import print_choice_results

    results = run_evaluate(model, data, batch_size, max_seq_length, device, precision)
    print_choice_results(data, results, as_json=as_json)


@predict_app.command("choice")
def predict_choice(
    model: _EvModel, data: _ChoiceData,
    out: Annotated[Path, path_option("--out", "-o", help="Predictions csv: id, prediction, [label,] prob0...; "
                                      "no extension: .csv.")],
    batch_size: _EvBatch = None, max_seq_length: _EvMaxLen = None, device: _FtDevice = None,
    precision: _EvPrecision = None, overwrite: _EvOverwrite = False,
) -> None:
    """Pick the choice of every example of a SWAG-style .csv, .jsonl file or hub copy with a multiple-choice
    model."""
    from bertctl.choice import predict_choice as run_predict

    typer.echo(str(run_predict(model, data, out, batch_size, max_seq_length, device, precision, overwrite)))
