"""The `bertctl` command line: one thin typer wrapper per command over a library function.

Heavy modules (torch, datasets) are imported inside command bodies so `bertctl --help` stays instant.
Library code raises `BertctlError`; the command groups of cli_base.py turn it into one line on stderr and an
exit code. The fine-tuning groups (finetune, evaluate, predict) live in cli_tasks.py.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated, Any

import typer

from bertctl import __version__
from bertctl.cli_base import (
    ClosedStdout,
    Group,
    buffer_raw_stdout,
    command_config,
    command_group,
    devnull_onto,
    path_argument,
    path_option,
    set_debug,
    show_warnings,
    typed_text,
)
from bertctl.cli_tasks import evaluate_app, finetune_app, predict_app
from bertctl.config import PretrainConfig
from bertctl.errors import Terminated, UsageError
from bertctl.hub import path_as_given

app = typer.Typer(cls=Group, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  rich_markup_mode=None,
                  help="BERT end to end: tokenizer, corpus, pretrain, finetune, evaluate, predict, fill.")
# options several commands share, spelt once
_Lowercase = Annotated[bool | None, typer.Option("--lowercase/--cased", help="Casing where the files leave it "
                                                 "open (a bare vocab.txt) [its tokenizer_config.json, else "
                                                 "lowercase].")]
_Overwrite = Annotated[bool | None, typer.Option("--overwrite/--no-overwrite", help="Replace OUT if it exists.")]
_ConfigFile = Annotated[Path | None, path_option("--config", help="YAML/JSON file of these fields (flags win).")]

tokenizer_app = command_group("Train a WordPiece tokenizer and inspect how it encodes text.")
corpus_app = command_group("Build pre-training instances (Arrow datasets), import Google's TFRecords or NVIDIA's "
                           "HDF5 shards, inspect them.")
app.add_typer(tokenizer_app, name="tokenizer")
app.add_typer(corpus_app, name="corpus")
app.add_typer(finetune_app, name="finetune")
app.add_typer(evaluate_app, name="evaluate")
app.add_typer(predict_app, name="predict")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"bertctl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
) -> None:
    set_debug(debug)
    show_warnings()


# --- tokenizer ---------------------------------------------------------------------------------------

@tokenizer_app.command("train")
def tokenizer_train(
    inputs: Annotated[list[str] | None, typer.Argument(help="Text files (.gz/.bz2/.xz too), folders, globs, "
                                                       ".jsonl/.json/.csv/.parquet files or a dataset name.",
                                                       show_default=False)] = None,
    out: Annotated[Path | None, path_option("--out", "-o", help="Output folder.")] = None,
    vocab_size: Annotated[int | None, typer.Option(help="Exact number of entries [30522].")] = None,
    lowercase: Annotated[bool | None, typer.Option("--lowercase/--cased", help="Uncased or cased "
                                                   "vocabulary [lowercase].")] = None,
    strip_accents: Annotated[bool | None, typer.Option("--strip-accents/--keep-accents", help="[strip when "
                                                       "lowercasing]")] = None,
    min_frequency: Annotated[int | None, typer.Option(help="Least count of a pair to merge [2].")] = None,
    limit_alphabet: Annotated[int | None, typer.Option(help="Most characters kept [1000].")] = None,
    text_column: Annotated[str | None, typer.Option(help="Column of table/dataset inputs [text].")] = None,
    overwrite: _Overwrite = None,
    config: _ConfigFile = None,
) -> None:
    """Train a WordPiece vocabulary (Google's vocab.txt format) on text; same inputs, same bytes."""
    flags = dict(locals())
    from bertctl.config import TokenizerTrainConfig
    from bertctl.tokenizer_train import train_tokenizer

    record = train_tokenizer(command_config(TokenizerTrainConfig, flags))
    skipped = f"; skipped {len(record['skipped'])} unreadable input(s)" if record["skipped"] else ""
    typer.echo(f"wrote {record['config']['out']}: {record['vocab_size']} entries ({record['alphabet']} "
               f"characters, {record['learned']} learned, {record['unused']} unused){skipped}; "
               f"vocab sha256 {record['vocab_sha256'][:16]}")


@tokenizer_app.command("encode")
def tokenizer_encode(
    tokenizer: Annotated[str, typer.Option("--tokenizer", "-t", help="Tokenizer or model folder, a vocab.txt, "
                                           "or a hub id.", show_default=False)],
    texts: Annotated[list[str] | None, typer.Argument(help="Texts to encode (none: one a line from stdin).",
                                                      show_default=False)] = None,
    pair: Annotated[str | None, typer.Option("--pair", help="Second segment (B) for every text.")] = None,
    lowercase: _Lowercase = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per text, one per line.")] = False,
) -> None:
    """Show the tokens, ids and segment ids of texts, [CLS] and [SEP] included."""
    import json

    from bertctl.tokenizer import format_row, iter_encoded_rows
    from bertctl.tokenizer_folder import load_tokenizer

    if not tokenizer.strip():
        raise UsageError("--tokenizer: empty; give a tokenizer or model folder, a vocab.txt or a hub id")
    all_texts = [typed_text(text) for text in texts or []]
    if not all_texts and not sys.stdin.isatty():
        all_texts = _stdin_lines()
    if not all_texts:
        raise UsageError("tokenizer encode: give TEXT arguments (or lines on stdin)")
    for row in iter_encoded_rows(load_tokenizer(path_as_given(tokenizer, "tokenizer"), lowercase=lowercase),
                                 all_texts, None if pair is None else typed_text(pair)):
        typer.echo(json.dumps(row, ensure_ascii=False) if as_json else format_row(row))


def _stdin_lines() -> list[str]:
    """stdin's lines without their line ends (CRLF too) or a leading byte-order mark: a file a Windows editor saved
    starts with one, which would be echoed at the head of the first text (`fill --file -` drops it too)."""
    from bertctl.files import stdin_text

    lines = [line.removesuffix("\r") for line in stdin_text().split("\n")]
    if lines[-1] == "":  # the last line's end, or no input at all: no text of its own
        lines.pop()
    if lines:
        lines[0] = lines[0].removeprefix("\ufeff")
    return lines


# --- corpus ------------------------------------------------------------------------------------------

@corpus_app.command("build")
def corpus_build(
    inputs: Annotated[list[str] | None, typer.Argument(help="Text files (.gz/.bz2/.xz too), folders, globs, "
                                                       ".jsonl/.json/.csv/.parquet files or a dataset name.",
                                                       show_default=False)] = None,
    tokenizer: Annotated[str | None, typer.Option("--tokenizer", "-t", help="Tokenizer or model folder, "
                                                  "a vocab.txt, or a hub id.", show_default=False)] = None,
    out: Annotated[Path | None, path_option("--out", "-o", help="Output corpus folder.")] = None,
    max_seq_length: Annotated[int | None, typer.Option(help="Tokens per instance [128].")] = None,
    objective: Annotated[str | None, typer.Option(help="mlm+nsp|mlm|mlm+sop [mlm+nsp].")] = None,
    masking: Annotated[str | None, typer.Option(help="dynamic (collator masks) | static (stored) "
                                                "[dynamic].")] = None,
    dupe_factor: Annotated[int | None, typer.Option(help="Passes over the data [1].")] = None,
    short_seq_prob: Annotated[float | None, typer.Option(help="Share of short targets [0.1].")] = None,
    masked_lm_prob: Annotated[float | None, typer.Option(help="Share of tokens to predict [0.15].")] = None,
    max_predictions_per_seq: Annotated[int | None, typer.Option(help="Most predictions per instance "
                                                                "[20].")] = None,
    whole_word_masking: Annotated[bool | None, typer.Option("--whole-word-masking/--no-whole-word-masking",
                                                            help="Mask whole words [off].")] = None,
    validation_fraction: Annotated[float | None, typer.Option(help="Share of documents held out [0].")] = None,
    text_column: Annotated[str | None, typer.Option(help="Column of table/dataset inputs [text].")] = None,
    document_per_line: Annotated[bool | None, typer.Option("--document-per-line/--no-document-per-line",
                                                           help="Each line of a text file is a document [blank "
                                                           "lines separate].")] = None,
    split_sentences: Annotated[bool | None, typer.Option("--split-sentences/--no-split-sentences", help="Split "
                                                         "lines into sentences [on].")] = None,
    lowercase: _Lowercase = None,
    shard_size_mb: Annotated[float | None, typer.Option(help="MB of text per shard [4].")] = None,
    seed: Annotated[int | None, typer.Option(help="[12345]")] = None,
    workers: Annotated[int | None, typer.Option(help="Processes, 0 = all cores; never changes the "
                                                "output [0].")] = None,
    overwrite: _Overwrite = None,
    config: _ConfigFile = None,
) -> None:
    """Build pre-training instances (Google's NSP/MLM semantics) as an Arrow DatasetDict; resumable."""
    flags = dict(locals())
    from bertctl.config import CorpusConfig
    from bertctl.corpus import build_corpus

    cfg = command_config(CorpusConfig, flags)
    manifest = build_corpus(cfg)
    counts = manifest["counts"]
    skipped = f"; skipped {len(manifest['skipped'])} unreadable input(s)" if manifest["skipped"] else ""
    _wrote_corpus(cfg.out, manifest, f"{counts['train']['documents'] + counts['validation'].get('documents', 0)} "
                  f"documents{skipped}")


def _wrote_corpus(out: Path, manifest: dict[str, Any], source: str) -> None:
    counts = manifest["counts"]
    held = f", {counts['validation']['instances']} validation" if counts["validation"].get("instances") else ""
    typer.echo(f"wrote {out}: {counts['train']['instances']} training instances{held} from {source}; "
               f"see 'bertctl corpus inspect {out}'")


@corpus_app.command("import")
def corpus_import(
    inputs: Annotated[list[str] | None, typer.Argument(help="TFRecord files of Google's create_pretraining_data.py "
                                                       "(GZIP/ZLIB too) or HDF5 shards of NVIDIA's, folders, globs.",
                                                       show_default=False)] = None,
    tokenizer: Annotated[str | None, typer.Option("--tokenizer", "-t", help="The vocabulary the records were made "
                                                  "with: tokenizer folder or vocab.txt.", show_default=False)] = None,
    out: Annotated[Path | None, path_option("--out", "-o", help="Output corpus folder.")] = None,
    validation_fraction: Annotated[float | None, typer.Option(help="Share of records held out [0].")] = None,
    lowercase: _Lowercase = None,
    workers: Annotated[int | None, typer.Option(help="Processes, each importing whole files, 0 = all cores; never "
                                                "changes the output [0].")] = None,
    overwrite: _Overwrite = None,
    config: _ConfigFile = None,
) -> None:
    """Import Google's pre-training TFRecords or NVIDIA's HDF5 shards (static masks, MLM+NSP) as a corpus that
    pretrain reads."""
    flags = dict(locals())
    from bertctl.config import CorpusImportConfig
    from bertctl.corpus_import import import_corpus

    cfg = command_config(CorpusImportConfig, flags)
    manifest = import_corpus(cfg)
    _wrote_corpus(cfg.out, manifest, f"{len(manifest['inputs'])} file(s), max_seq_length "
                  f"{manifest['max_seq_length']}, max_predictions_per_seq {manifest['max_predictions_per_seq']}")


@corpus_app.command("inspect")
def corpus_inspect(
    corpus: Annotated[Path, path_argument(help="A corpus folder from 'bertctl corpus build' or 'corpus import'.")],
    num: Annotated[int, typer.Option("--num", "-n", min=0, help="Instances to show.")] = 3,
    as_json: Annotated[bool, typer.Option("--json", help="Print the statistics as one JSON object.")] = False,
) -> None:
    """Statistics (lengths, padding, masks, NSP balance) and a few decoded instances of a corpus."""
    import json

    from bertctl.corpus_inspect import format_report, inspect_corpus

    report = inspect_corpus(corpus, num=0 if as_json else num)
    if as_json:
        report.pop("samples")
    typer.echo(json.dumps(report) if as_json else format_report(report))


# --- pretrain ----------------------------------------------------------------------------------------

@app.command("pretrain")
def pretrain(
    corpus: Annotated[Path | None, path_option(help="Corpus folder from `bertctl corpus build` or `corpus import` "
                                                "(none: quick start on the bundled novels).")] = None,
    out: Annotated[Path | None, path_option("--out", "-o", help="Run folder [runs/quickstart].")] = None,
    model_config: Annotated[str | None, typer.Option(help="tiny|mini|small|medium|base|large or a "
                                                     "config.json [base; quick start: tiny].")] = None,
    tokenizer: Annotated[str | None, typer.Option("--tokenizer", "-t", help="Tokenizer folder or hub id "
                                                  "[the corpus's].")] = None,
    init_from: Annotated[str | None, typer.Option(help="Start from this model's weights, a folder or hub id "
                                                  "(e.g. phase 2 at 512), fresh optimizer.")] = None,
    steps: Annotated[int | None, typer.Option(help="Optimizer steps [1000000].")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Global batch in sequences [256].")] = None,
    micro_batch_size: Annotated[int | None, typer.Option(help="Sequences per forward pass and "
                                                         "process [batch / processes].")] = None,
    lr: Annotated[float | None, typer.Option(help="Peak learning rate [1e-4].")] = None,
    warmup_steps: Annotated[int | None, typer.Option(help="Linear warmup steps [10000].")] = None,
    warmup_fraction: Annotated[float | None, typer.Option(help="Warmup as a share of --steps.")] = None,
    schedule: Annotated[str | None, typer.Option(help="linear|cosine|constant [linear].")] = None,
    optimizer: Annotated[str | None, typer.Option(help="adamw|lamb [adamw].")] = None,
    weight_decay: Annotated[float | None, typer.Option(help="Decoupled weight decay [0.01].")] = None,
    adam_beta1: Annotated[float | None, typer.Option(help="[0.9]")] = None,
    adam_beta2: Annotated[float | None, typer.Option(help="[0.999]")] = None,
    adam_eps: Annotated[float | None, typer.Option(help="[1e-6]")] = None,
    clip: Annotated[float | None, typer.Option(help="Max gradient norm, 0 = off [1.0].")] = None,
    precision: Annotated[str | None, typer.Option(help="fp32|bf16|fp16|auto [auto].")] = None,
    compile: Annotated[bool | None, typer.Option("--compile/--no-compile", help="torch.compile [on CUDA].")] = None,
    dropout: Annotated[float | None, typer.Option(help="Hidden and attention dropout [model's, 0.1].")] = None,
    gradient_checkpointing: Annotated[bool | None, typer.Option(
        "--gradient-checkpointing/--no-gradient-checkpointing",
        help="Recompute each layer in the backward pass: less memory, ~1/3 more compute, same numbers [off].")] = None,
    save_every: Annotated[int | None, typer.Option(help="Steps between checkpoints [10000].")] = None,
    keep: Annotated[int | None, typer.Option(help="Newest step checkpoints kept, 0 = all [3].")] = None,
    log_every: Annotated[int | None, typer.Option(help="Steps between metrics rows [100].")] = None,
    eval_every: Annotated[int | None, typer.Option(help="Steps between validation passes [10000].")] = None,
    eval_samples: Annotated[int | None, typer.Option(help="Validation sequences per pass [10000].")] = None,
    seed: Annotated[int | None, typer.Option(help="[42]")] = None,
    resume: Annotated[bool | None, typer.Option("--resume/--no-resume", help="Continue from the newest "
                                                "checkpoint in --out.")] = None,
    num_workers: Annotated[int | None, typer.Option(help="DataLoader workers [1].")] = None,
    device: Annotated[str | None, typer.Option(help="cpu|cuda|cuda:N [cuda when available].")] = None,
    max_bad_steps: Annotated[int | None, typer.Option(help="NaN/inf steps in a row before stopping [5].")] = None,
    config: _ConfigFile = None,
) -> None:
    """Pre-train BERT with MLM (+NSP/SOP); no arguments runs the quick start on bundled text.

    Without --corpus (the quick start) the defaults are the quick start's, not the paper's shown below:
    --model-config tiny --steps 2500 --batch-size 32 --lr 2e-3 --dropout 0.0 --warmup-fraction 0.04 --no-compile
    --save-every 500 --log-every 50 --eval-every 500 --eval-samples 512.
    """
    flags = {k: v for k, v in locals().items() if k != "config"}
    from bertctl.config import QUICKSTART_PRETRAIN, PretrainConfig
    from bertctl.config_files import build_config, layered, read_config_file
    from bertctl.pretrain import pretrain as run_pretrain

    file_values = read_config_file(config) if config else {}
    if flags["corpus"] is None and file_values.get("corpus") is None:
        file_values = layered(PretrainConfig, QUICKSTART_PRETRAIN, file_values)
    where = run_pretrain(build_config(PretrainConfig, file_values, config_file=config, **flags))
    if os.environ.get("RANK", "0") == "0":  # under torchrun rank 0 alone, as it alone says the `saved` line
        typer.echo(f"try: bertctl fill --model {where} \"the [MASK] was very happy.\"")


# --- fill / convert / info --------------------------------------------------------------------------

QUICKSTART_MODEL = PretrainConfig.out / "final"  # where `bertctl pretrain` with no arguments saves


@app.command("fill")
def fill(
    texts: Annotated[list[str] | None, typer.Argument(help="Texts with one or more [MASK] tokens.")] = None,
    model: Annotated[str, typer.Option("--model", "-m", help="Model folder with an MLM head, or a hub id "
                                       "(bert-base-uncased).")] = str(QUICKSTART_MODEL),
    top_k: Annotated[int, typer.Option("--top-k", min=1, help="Predictions per [MASK].")] = 5,
    file: Annotated[Path | None, path_option("--file", "-f", help="Read texts from this file, one a line "
                                              "('-' for stdin).")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Texts per forward pass.")] = 32,
    truncate: Annotated[bool, typer.Option("--truncate", help="Cut texts longer than the model's "
                                           "max positions instead of refusing them.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per text, one per line.")] = False,
    device: Annotated[str | None, typer.Option("--device", help="cpu|cuda|cuda:N [cuda when available].")] = None,
    targets: Annotated[list[str] | None, typer.Option("--target", "-t", help="Rank only this token (a "
                                                      "vocabulary entry or a word); repeat for more.")] = None,
) -> None:
    """Predict the tokens behind [MASK]: every mask gets its own top-k from one forward pass."""
    from bertctl.fill import iter_fill, print_fill_results, read_texts

    all_texts = [typed_text(text) for text in texts or []]
    if file is not None:
        all_texts += read_texts(file)
    elif not all_texts and not sys.stdin.isatty():
        all_texts = read_texts(Path("-"))
    if not all_texts and file is not None:  # told to give a --file F, the user who gave one would be lost
        raise UsageError(f"--file: {'standard input' if str(file) == '-' else file} holds no text (blank lines are "
                         "skipped); give one text with [MASK] a line")
    if not all_texts:
        raise UsageError("fill: give a text with [MASK] as an argument, or --file F (one text a line)")
    _refuse_blank_model(model, "--model")
    if Path(model) == QUICKSTART_MODEL and not QUICKSTART_MODEL.exists():
        raise UsageError(f"fill: no --model given, and the quick start's {model} is not there yet; run "
                         "`bertctl pretrain` first, or pass --model FOLDER (or a hub id such as bert-base-uncased)")
    wanted = [typed_text(target) for target in targets or []] or None
    results = iter_fill(all_texts, model, top_k=top_k, batch_size=batch_size, truncate=truncate, device=device,
                        targets=wanted)  # printed window by window: the results are never all held
    print_fill_results(results, as_json=as_json)


@app.command("convert")
def convert(
    source: Annotated[str, typer.Argument(help="Any model folder bertctl reads (bertctl, transformers, Google's "
                                          "TensorFlow or NVIDIA's checkpoints), or a hub id.")],
    out: Annotated[Path, path_option("--out", "-o", help="Where to write the canonical bertctl folder.")],
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace OUT if it exists.")] = False,
) -> None:
    """Rewrite a model folder as a canonical bertctl folder (safetensors, transformers' names)."""
    from bertctl.convert import convert as run_convert

    summary = run_convert(source, out, overwrite=overwrite)
    typer.echo(summary)


@app.command("info")
def info(
    model: Annotated[str, typer.Argument(help="A model folder, or a hub id.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Config, parameter count, heads, vocabulary and tokenizer of a model folder."""
    from bertctl.info import info as run_info
    from bertctl.info import print_info

    _refuse_blank_model(model, "MODEL")
    print_info(run_info(model), as_json=as_json)


def _refuse_blank_model(model: str, named: str) -> None:
    """`--model "$UNSET"` would be looked for as a folder named "" or " ", and refused without its name."""
    if not model.strip():
        raise UsageError(f"{named}: empty; give a model folder or a hub id")


def main() -> None:
    """Console-script entry point."""
    main_thread = threading.current_thread() is threading.main_thread()  # only there may signal handlers be set
    if sys.stdin is None:  # started with stdin closed (`<&-`): no lines to read, as from /dev/null
        devnull_onto(0, os.O_RDONLY)  # an output file opened later must not get its number
        sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 (the process's stdin, open until exit)
    if sys.stdout is None:  # started with stdout closed (`>&-`)
        devnull_onto(1, os.O_WRONLY)
        sys.stdout = ClosedStdout()
    if sys.stderr is None:  # started with stderr closed (`2>&-`): warnings and progress go nowhere, the work is done
        devnull_onto(2, os.O_WRONLY)
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (the process's stderr, open until exit)
    buffer_raw_stdout()
    if main_thread and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate)
    try:
        app(prog_name="bertctl")
    finally:
        if main_thread:
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, _exit_at_once)
            gc.freeze()  # the interpreter's last collection walks torch's ~500k objects: a second of CPU at exit


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM while a command runs stops it as Ctrl-C does (cleanup, one line), with exit code 143; training
    installs its own graceful handler for the time it trains."""
    raise Terminated


def _exit_at_once(signum: int, frame: object) -> None:
    """The command is over: a signal while the interpreter shuts down (a second Ctrl-C after a graceful stop
    lands in torch's exit hooks) ends the process at once, not with "Exception ignored" and exit code 0."""
    os._exit(128 + signum)
