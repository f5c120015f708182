"""`bertctl fill`: top-k predictions for every [MASK] in a text, all from one forward pass per batch."""

from __future__ import annotations

import logging
import reprlib
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from bertctl.checkpoint import build_model, model_tokenizer, read_checkpoint, transformers_architecture
from bertctl.config_types import is_list, take_bool, take_int
from bertctl.data.batches import pad_batch
from bertctl.errors import UsageError, quoted
from bertctl.files import compressed, json_text, stdin_text, user_path
from bertctl.tokenizer import ENCODE_CHUNK, BertTokenizer
from bertctl.training import pick_device, to_device

log = logging.getLogger(__name__)
SORT_WINDOW = 8192  # texts sorted by length together; each window's results go out before the next one runs


@dataclass(frozen=True)
class Prediction:
    token: str  # "" for a row beyond the tokenizer (a padded embedding matrix), as transformers' pipeline shows it
    token_id: int
    score: float  # softmax probability over every embedding row (the vocabulary, and padding rows if any)


@dataclass(frozen=True)
class FillResult:
    text: str
    predictions: list[list[Prediction]]  # one top-k list per [MASK], in order ([] for one --truncate cut off)
    filled: str  # the text with every [MASK] replaced by its best prediction (as truncated)


def load_mlm(model: Path | str) -> tuple[torch.nn.Module, BertTokenizer]:
    """A model folder's MLM head and tokenizer, refusing folders that cannot fill masks."""
    ckpt = read_checkpoint(model)
    if "mlm" not in ckpt.parts:
        kind = transformers_architecture(ckpt.architecture, ckpt.parts)
        raise UsageError(f"{model} has no MLM head (it is a {kind}); fill needs a pre-trained model with its MLM "
                         "head, e.g. a bertctl pretrain folder or a BertForMaskedLM")
    tokenizer = model_tokenizer(ckpt)
    return build_model(ckpt, "BertForMaskedLM", share_weights=True).eval(), tokenizer


def _encode(texts: list[str], tokenizer: BertTokenizer, max_length: int,
            truncate: bool) -> list[tuple[np.ndarray, int, int]]:
    """Each text's ids (int32), its number of [MASK] tokens within them, and how many --truncate cut off."""
    rows = []
    for lo in range(0, len(texts), ENCODE_CHUNK):
        for number, (text, encoding) in enumerate(zip(texts[lo: lo + ENCODE_CHUNK],
                                                      tokenizer.encode_batch(texts[lo: lo + ENCODE_CHUNK]),
                                                      strict=True), lo + 1):
            ids = list(encoding.ids)
            if tokenizer.mask_id not in ids:
                raise UsageError(f"text {number} has no {tokenizer.special_token('mask')} token: {text[:60]!r}")
            masks = ids.count(tokenizer.mask_id)
            if len(ids) > max_length:
                if not truncate:
                    raise UsageError(f"text {number} is {len(ids)} tokens long but the model takes at most "
                                     f"{max_length}; shorten it or pass --truncate")
                ids = ids[: max_length - 1] + [tokenizer.sep_id]
                if tokenizer.mask_id not in ids:
                    raise UsageError(f"text {number}: no {tokenizer.special_token('mask')} is left within the "
                                     f"first {max_length} tokens")
                if masks > ids.count(tokenizer.mask_id):
                    log.warning("warning: text %d: --truncate cut off %d of its %d masks (after token %d); their "
                                "prediction lists are empty", number, masks - ids.count(tokenizer.mask_id), masks,
                                max_length)
            kept = ids.count(tokenizer.mask_id)
            rows.append((np.asarray(ids, dtype=np.int32), kept, masks - kept))
    return rows


def fill(
    texts: list[str],
    model: Path | str,
    top_k: int = 5,
    batch_size: int = 32,
    truncate: bool = False,
    device: str | None = None,
    targets: Sequence[str] | None = None,
) -> list[FillResult]:
    """Predict every [MASK] of every text; the MLM head runs only at the masked positions. With `targets`, only
    those tokens are ranked (as transformers' fill-mask `targets`): scores stay probabilities over every row."""
    return list(iter_fill(texts, model, top_k, batch_size, truncate, device, targets))


@torch.inference_mode()
def iter_fill(
    texts: list[str],
    model: Path | str,
    top_k: int = 5,
    batch_size: int = 32,
    truncate: bool = False,
    device: str | None = None,
    targets: Sequence[str] | None = None,
) -> Iterator[FillResult]:
    """`fill`'s results one by one, in the texts' order. Every text is checked (encoded) before the first result;
    then each window of SORT_WINDOW texts is run (longest first) and its results given out, so they are never
    all held at once."""
    top_k = take_int("--top-k", top_k, minimum=1)
    batch_size = take_int("--batch-size", batch_size, minimum=1)
    if not is_list(texts):
        raise UsageError(f"fill: give a list of texts, not {quoted(texts, reprlib.repr)}")
    texts = list(texts)  # a generator too
    truncate = take_bool("truncate", truncate)
    with torch.random.fork_rng(devices=[]):  # building the model draws its (then replaced) random init: the
        mlm, tokenizer = load_mlm(model)     # caller's torch generator must not move, as with from_pretrained
    run_on = pick_device(device)
    mlm.to(run_on)
    top_k = min(top_k, mlm.config.vocab_size)  # rows, not tokens: a padded matrix's spare rows compete too
    candidates = None if targets is None else torch.as_tensor(target_ids(targets, tokenizer), device=run_on)
    if candidates is not None:
        top_k = min(top_k, len(candidates))
    rows = _encode(texts, tokenizer, mlm.config.max_position_embeddings, truncate)
    lengths = np.fromiter((len(ids) for ids, _, _ in rows), dtype=np.int64, count=len(rows))
    for lo in range(0, len(rows), SORT_WINDOW):
        yield from _fill_window(mlm, tokenizer, texts, rows, lengths, lo, batch_size, top_k, candidates, run_on)


def _fill_window(mlm: torch.nn.Module, tokenizer: BertTokenizer, texts: list[str],
                 rows: list[tuple[np.ndarray, int, int]], lengths: np.ndarray, lo: int, batch_size: int, top_k: int,
                 candidates: torch.Tensor | None, run_on: torch.device) -> list[FillResult]:
    """The results of texts lo .. lo + SORT_WINDOW, in their order."""
    hi = min(lo + SORT_WINDOW, len(rows))
    results: list[FillResult | None] = [None] * (hi - lo)
    for window_rows in _batches(lengths[lo:hi], batch_size):
        batch_rows = window_rows + lo
        chunk = [rows[r][0] for r in batch_rows]
        batch = to_device({k: torch.from_numpy(v) for k, v in pad_batch(chunk, None, tokenizer.pad_id).items()},
                          run_on)
        hidden, _ = mlm.encode(batch["input_ids"], None, batch.get("attention_mask"))
        logits = mlm.mlm(hidden[batch["input_ids"] == tokenizer.mask_id])  # (N, V): the head at the masks only
        probabilities = logits.float().softmax(-1)
        if candidates is None:
            scores, best = probabilities.topk(top_k, dim=-1)  # (N, k), rows in batch order
        else:
            scores, picked = probabilities[:, candidates].topk(top_k, dim=-1)
            best = candidates[picked]
        scores, best = scores.cpu().tolist(), best.cpu().tolist()
        cursor = 0
        for r, ids in zip(batch_rows.tolist(), chunk, strict=True):
            count, cut = rows[r][1], rows[r][2]
            per_mask = [[Prediction(_token(tokenizer, t), t, s) for t, s in zip(best[j], scores[j], strict=True)]
                        for j in range(cursor, cursor + count)]
            cursor += count
            results[r - lo] = FillResult(texts[r], per_mask + [[] for _ in range(cut)],
                                         _filled(ids, per_mask, tokenizer))
    return results  # type: ignore[return-value]  # every row is filled


def target_ids(targets: Sequence[str], tokenizer: BertTokenizer) -> list[int]:
    """The ids to rank, as transformers' fill-mask pipeline picks them: a vocabulary entry as it is (`##ing` too),
    else the first wordpiece of the word (with a warning), a word with no wordpiece is dropped (with a warning);
    each id once, in the order of the pipeline's list(set(ids)): topk keeps that order among exactly equal
    scores, so ties come out as the pipeline gives them."""
    if not is_list(targets):
        raise UsageError(f"--target: give a list of tokens, not {quoted(targets, reprlib.repr)}")
    ids: list[int] = []
    for target in targets:
        token_id = tokenizer.token_to_id(target)
        if token_id is None:
            pieces = tokenizer.encode(target, add_special_tokens=False).ids
            if not pieces:
                log.warning("warning: --target %r is not in the vocabulary and has no wordpiece; it is ignored",
                            target)
                continue
            token_id = pieces[0]
            log.warning("warning: --target %r is not in the vocabulary; its first wordpiece %r stands for it",
                        target, tokenizer.id_to_token(token_id))
        ids.append(token_id)
    if not ids:
        raise UsageError("--target: none of the targets is a token of this model's vocabulary; give words or "
                         "vocabulary entries (see `bertctl tokenizer encode`)")
    return list(set(ids))


def _batches(lengths: np.ndarray, batch_size: int) -> Iterator[np.ndarray]:
    """Row numbers, longest texts first, `batch_size` at a time: texts of like length share a batch, so little
    is padded (in the given order, one long text in a batch padded every other to its length)."""
    order = np.argsort(-lengths, kind="stable")
    for start in range(0, len(order), batch_size):
        yield order[start: start + batch_size]


def _token(tokenizer: BertTokenizer, token_id: int) -> str:
    """The vocabulary entry; "" for an id past the tokenizer, which is what transformers' fill-mask pipeline
    shows (its token_str is tokenizer.decode([id])) and what our decode gives for it in the filled text."""
    return tokenizer.id_to_token(token_id) if token_id < tokenizer.vocab_size else ""


def _filled(row: np.ndarray, predictions: list[list[Prediction]], tokenizer: BertTokenizer) -> str:
    best = iter(p[0].token_id for p in predictions)
    return tokenizer.decode([next(best) if t == tokenizer.mask_id else t for t in row.tolist()])


def read_texts(path: Path | str) -> list[str]:
    """One text a line from a file or stdin ('-'); blank lines are skipped. Only \n (or \r\n) ends a line, as
    for `tokenizer encode`: str.splitlines would also cut at U+2028, form feeds and the like inside a text. A
    byte-order mark (Windows editors write one) is dropped, or it would lead the first text and be echoed back."""
    text = stdin_text() if str(path) == "-" else _file_text(user_path(path, "--file"))
    lines = (line.removesuffix("\r") for line in text.removeprefix("\ufeff").split("\n"))
    return [line for line in lines if line.strip()]


def _file_text(path: Path) -> str:
    """A --file's text, or one line saying what it is instead (missing, a folder, compressed, not UTF-8)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"--file: {path} does not exist") from None
    except IsADirectoryError:
        raise UsageError(f"--file: {path} is a folder; give a text file, one text a line") from None
    except OSError as exc:
        raise UsageError(f"--file: cannot read {path}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if (refusal := compressed(path, f"--file: {path}", "fill")) is not None:
            raise refusal from None
        line = data.count(b"\n", 0, exc.start) + 1
        raise UsageError(f"--file: line {line} of {path} is not valid UTF-8 (byte {data[exc.start]:#04x}); "
                         "convert the file to UTF-8 first") from None


def print_fill_results(results: Iterable[FillResult], as_json: bool = False) -> None:
    """JSON lines (a NaN score, from a model whose weights are NaN, as null), or a rich table per text with the
    best fill above it."""
    if as_json:
        for result in results:
            data = {"text": result.text, "predictions": [[asdict(p) for p in mask] for mask in result.predictions]}
            sys.stdout.write(json_text(data, ensure_ascii=False) + "\n")
        return
    from rich.table import Table
    from rich.text import Text  # tokens like [unused0] are text, not rich markup

    from bertctl.cli_base import table_console

    console = table_console()
    for result in results:
        table = Table(title=Text(result.filled), title_justify="left", show_edge=False)
        table.add_column("mask", justify="right")
        table.add_column("rank", justify="right")
        table.add_column("token")
        table.add_column("probability", justify="right")
        for mask_number, predictions in enumerate(result.predictions, 1):
            for rank, prediction in enumerate(predictions, 1):
                table.add_row(str(mask_number) if rank == 1 else "", str(rank), Text(prediction.token),
                              f"{prediction.score:.4f}")
        console.print(table)
