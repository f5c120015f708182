"""The `bertctl` command line: one thin typer wrapper per command over a library function.

Heavy modules (torch, datasets) are imported inside command bodies so `bertctl --help` stays instant.
Library code raises `BertctlError`; this module alone turns it into one line on stderr and an exit code.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from typer.core import TyperGroup

from bertctl import __version__
from bertctl.errors import BertctlError, UsageError

_debug = False


def _fail(message: str, code: int) -> typer.Exit:
    typer.echo(f"bertctl: error: {' '.join(str(message).split())}", err=True)
    return typer.Exit(code)


class _Group(TyperGroup):
    """Turns library errors into one line and an exit code (a traceback only with --debug)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except BertctlError as exc:
            if _debug:
                traceback.print_exc()
            raise _fail(str(exc), exc.exit_code) from None
        except KeyboardInterrupt:
            raise _fail("interrupted", 130) from None
        except Exception as exc:
            if _debug:
                traceback.print_exc()
            raise _fail(f"{type(exc).__name__}: {exc} (rerun with --debug for the traceback)", 1) from None


def _typer(help_text: str) -> typer.Typer:
    return typer.Typer(cls=_Group, help=help_text, no_args_is_help=True, add_completion=False,
                       pretty_exceptions_enable=False, rich_markup_mode=None)


app = typer.Typer(cls=_Group, add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="BERT end to end: tokenizer, corpus, pretrain, finetune, evaluate, predict, fill.")
tokenizer_app = _typer("Train a WordPiece tokenizer and inspect how it encodes text.")
corpus_app = _typer("Build pre-training instances (Arrow datasets) and inspect them.")
finetune_app = _typer("Fine-tune a model on GLUE or on your own labelled data.")
evaluate_app = _typer("Score a fine-tuned model on a task's dev set.")
predict_app = _typer("Write test-set predictions (GLUE submission files).")
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
    global _debug
    _debug = debug


def _not_built(command: str) -> None:
    raise UsageError(f"'bertctl {command}' is not built yet in bertctl {__version__}")


# --- tokenizer ---------------------------------------------------------------------------------------

@tokenizer_app.command("train")
def tokenizer_train() -> None:
    """Train a WordPiece vocabulary (not built yet)."""
    _not_built("tokenizer train")


@tokenizer_app.command("encode")
def tokenizer_encode() -> None:
    """Show tokens, ids and segment ids for text (not built yet)."""
    _not_built("tokenizer encode")


# --- corpus ------------------------------------------------------------------------------------------

@corpus_app.command("build")
def corpus_build() -> None:
    """Build pre-training instances (not built yet)."""
    _not_built("corpus build")


@corpus_app.command("inspect")
def corpus_inspect() -> None:
    """Statistics and sample instances of a corpus (not built yet)."""
    _not_built("corpus inspect")


# --- pretrain ----------------------------------------------------------------------------------------

@app.command("pretrain")
def pretrain() -> None:
    """Pre-train BERT with MLM (+NSP/SOP) (not built yet)."""
    _not_built("pretrain")


# --- finetune / evaluate / predict ------------------------------------------------------------------

@finetune_app.command("glue")
def finetune_glue() -> None:
    """Fine-tune on a GLUE task (not built yet)."""
    _not_built("finetune glue")


@evaluate_app.command("glue")
def evaluate_glue() -> None:
    """Evaluate on a GLUE task's dev set (not built yet)."""
    _not_built("evaluate glue")


@predict_app.command("glue")
def predict_glue() -> None:
    """Write GLUE submission files (not built yet)."""
    _not_built("predict glue")


# --- fill / convert / info --------------------------------------------------------------------------

@app.command("fill")
def fill(
    texts: Annotated[list[str] | None, typer.Argument(help="Texts with one or more [MASK] tokens.")] = None,
    model: Annotated[Path, typer.Option("--model", "-m", help="Model folder with an MLM head.")] = Path(
        "runs/quickstart/final"),
    top_k: Annotated[int, typer.Option("--top-k", min=1, help="Predictions per [MASK].")] = 5,
    file: Annotated[Path | None, typer.Option("--file", "-f", help="Read texts from this file, one a line "
                                              "('-' for stdin).")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Texts per forward pass.")] = 32,
    truncate: Annotated[bool, typer.Option("--truncate", help="Cut texts longer than the model's "
                                           "max positions instead of refusing them.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per text, one per line.")] = False,
    device: Annotated[str | None, typer.Option("--device", help="cpu, cuda, cuda:1 ... "
                                               "(default: cuda when available).")] = None,
) -> None:
    """Predict the tokens behind [MASK]: every mask gets its own top-k from one forward pass."""
    from bertctl.fill import fill as run_fill
    from bertctl.fill import print_fill_results, read_texts

    all_texts = list(texts or [])
    if file is not None:
        all_texts += read_texts(file)
    elif not all_texts and not sys.stdin.isatty():
        all_texts = read_texts(Path("-"))
    if not all_texts:
        raise UsageError("fill: give a text with [MASK] as an argument, or --file F (one text a line)")
    results = run_fill(all_texts, model, top_k=top_k, batch_size=batch_size, truncate=truncate, device=device)
    print_fill_results(results, as_json=as_json)


@app.command("convert")
def convert(
    source: Annotated[Path, typer.Argument(help="Any model folder bertctl reads (bertctl or transformers).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the canonical bertctl folder.")],
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace OUT if it exists.")] = False,
) -> None:
    """Rewrite a model folder as a canonical bertctl folder (safetensors, transformers' names)."""
    from bertctl.convert import convert as run_convert

    summary = run_convert(source, out, overwrite=overwrite)
    typer.echo(summary)


@app.command("info")
def info(
    model: Annotated[Path, typer.Argument(help="A model folder.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Config, parameter count, heads, vocabulary and tokenizer of a model folder."""
    from bertctl.info import info as run_info
    from bertctl.info import print_info

    print_info(run_info(model), as_json=as_json)


def main() -> None:
    """Console-script entry point."""
    app(prog_name="bertctl")
