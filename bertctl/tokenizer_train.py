"""`bertctl tokenizer train`: a WordPiece vocabulary of exactly `vocab_size` entries, the same bytes every run.

Reads top to bottom: check the flags -> pass 1 counts characters and fixes the alphabet -> pass 2 streams
the text into `tokenizers`' WordPieceTrainer -> the vocabulary is padded to size -> the folder is written
as OUT.partial and renamed.

Why two passes: the trainer alone is not deterministic. It cuts the alphabet at `limit_alphabet` with ties
broken in hash order, and numbers the `##c` pieces in hash order, which then breaks ties between equally
frequent merges. Handing it the alphabet and every `##c` up front as fixed tokens (ids 5...) leaves it
nothing to decide by hash order. Counting characters is cheap next to training (numpy over the text).

Vocabulary layout: [PAD] [UNK] [CLS] [SEP] [MASK] (ids 0-4), the alphabet in code point order, `##c` for
every character that can continue a word (not punctuation or CJK, which always stand alone), the learned
pieces in the order learned, then `[unusedN]` if the corpus ran out of pairs seen `min_frequency` times.
"""

from __future__ import annotations

import functools
import logging
import unicodedata
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertctl import __version__
from bertctl.config import TokenizerTrainConfig
from bertctl.config_records import config_to_dict
from bertctl.config_types import take_config
from bertctl.data.sources import ReadStats, Source, expand_inputs, iter_texts
from bertctl.errors import BertctlError, UsageError
from bertctl.files import building_folder, check_new_out, refuse_inputs_inside, write_json_atomic
from bertctl.tokenizer import CONTINUATION, SPECIAL_TOKENS, UNK, BertTokenizer
from bertctl.tokenizer_pipeline import encodable_pre_tokenizer, normalizer, pre_tokenizer

BATCH_CHARS = 1 << 20  # characters per batch handed to numpy / the trainer (memory stays ~ this)
LINE_CHARS = 1 << 16  # longer lines reach the trainer in pieces cut at spaces (its memory grows with a text)
COUNT_CHARS = 1 << 16  # characters counted at a time in pass 1 (small buffers: 3x faster than 1M)
PROVENANCE = "provenance.json"
log = logging.getLogger(__name__)
_SEPARATORS = {" ", "\u2028", "\u2029"}  # characters the pre-tokenizer splits on: never in a word


def train_tokenizer(cfg: TokenizerTrainConfig) -> dict[str, Any]:
    """Train, save into cfg.out, and return the provenance record written next to the vocabulary."""
    take_config("train_tokenizer", cfg, TokenizerTrainConfig)
    out = check_new_out(cfg.out or "", overwrite=cfg.overwrite)
    sources = expand_inputs(cfg.inputs)
    refuse_inputs_inside(out, sources, read_whole=cfg.inputs)
    stats = ReadStats.for_sources(sources)
    counts = count_characters(sources, cfg, stats)
    alphabet = choose_alphabet(counts, cfg.limit_alphabet)
    skipped = {source for source, _ in stats.skipped}
    sources = [s for s in sources if str(s) not in skipped]  # warned about once is enough
    stats.total_bytes = ReadStats.for_sources(sources).total_bytes
    fixed = [*SPECIAL_TOKENS, *alphabet, *continuations(alphabet)]
    if len(fixed) > cfg.vocab_size:
        raise UsageError(f"--vocab-size {cfg.vocab_size} is smaller than the {len(SPECIAL_TOKENS)} special tokens "
                         f"plus the {len(fixed) - len(SPECIAL_TOKENS)} characters and ##characters of the alphabet; "
                         f"give at least {len(fixed)} or lower --limit-alphabet")
    tokens = learn_vocab(sources, cfg, fixed, stats)
    learned = len(tokens) - len(fixed)
    if cfg.vocab_size - len(tokens) > cfg.vocab_size // 2:
        log.warning(
            "warning: the text gave %d pieces, so %d of the %d entries are [unused] placeholders; give more text "
            "or a smaller --vocab-size", learned, cfg.vocab_size - len(tokens), cfg.vocab_size)
    tokens = pad_vocab(tokens, cfg.vocab_size)
    tokenizer = BertTokenizer.from_vocab(tokens, cfg.lowercase, cfg.strip_accents)
    record = {
        "format": "bertctl-tokenizer", "bertctl": __version__, "config": config_to_dict(cfg),
        "inputs": [{"source": str(s), "bytes": s.stat().st_size} if isinstance(s, Path) else {"source": s}
                   for s in sources],
        "skipped": [{"source": s, "reason": why} for s, why in stats.skipped],
        "vocab_size": tokenizer.vocab_size, "alphabet": len(alphabet), "learned": learned,
        "unused": len(tokens) - len(fixed) - learned, "vocab_sha256": tokenizer.sha256(),
    }
    _write_folder(out, tokenizer, record, cfg.overwrite)
    return record


def _bar(stats: ReadStats, desc: str) -> Any:
    from bertctl.data.read_bar import ReadBar

    return ReadBar(desc, stats.total_bytes, disable=None)


def _batches(sources: Sequence[Source], cfg: TokenizerTrainConfig, stats: ReadStats, bar: Any,
             chars: int = BATCH_CHARS) -> Iterator[list[str]]:
    """Lists of whole lines (long ones cut at white space) of about `chars` characters; the bar follows the
    bytes read."""
    batch: list[str] = []
    size = 0
    stats.bytes_read = stats.files_read = 0  # pass 2 reads only what pass 1 could (skips stay recorded)
    for line in iter_texts(sources, cfg.text_column, stats):
        for text in _cut_at_spaces(line) if len(line) > LINE_CHARS else (line,):
            batch.append(text)
            size += len(text)
            if size >= chars:
                yield batch
                bar.update(stats.bytes_read - bar.n)
                batch, size = [], 0
    if batch:
        yield batch
    bar.update(stats.bytes_read - bar.n)


def _cut_at_spaces(text: str) -> Iterator[str]:
    """A long line in pieces of at most LINE_CHARS, cut at spaces (the words stay whole): the trainer holds
    ~80 bytes per character of a text at once, so one 10 MB line took 0.8 GB."""
    start = 0
    while len(text) - start > LINE_CHARS:
        cut = max(text.rfind(space, start + 1, start + LINE_CHARS) for space in " \t")
        if cut <= start:  # no space or tab: any other white space (CJK text, a table cell's line breaks)
            cut = max(text.rfind(space, start + 1, start + LINE_CHARS) for space in _white_space())
        end = cut if cut > start else start + LINE_CHARS  # no space at all: a word far over 100 characters
        yield text[start:end]
        start = end
    yield text[start:] if start else text


@functools.cache
def _white_space() -> str:
    """What the clean-up leaves as white space, words' ends: tab, line breaks, U+2028/9 and the Zs spaces."""
    return "\t\n\r\u2028\u2029" + "".join(chr(c) for c in range(0x10000) if unicodedata.category(chr(c)) == "Zs")


def count_characters(sources: Sequence[Source], cfg: TokenizerTrainConfig, stats: ReadStats) -> dict[str, int]:
    """Pass 1: how often each character occurs after normalisation (lowercasing, accents...).

    Code points are counted with numpy and normalised one by one, which is cheap. A batch holding a character
    the normaliser changes by its neighbours (NFC composing a letter and a separate accent when accents are kept,
    a word-final Σ lowercased to ς) is normalised whole instead, as encoding sees it. Batches are whole lines (a
    long one cut at white space), as pass 2 reads them."""
    raw = np.zeros(0x110000, dtype=np.int64)  # code points as read; normalised one by one below
    whole = np.zeros(0x110000, dtype=np.int64)  # code points of the batches normalised whole
    context = _neighbour_dependent(cfg.lowercase, cfg.strip_accents)
    clean = normalizer(cfg.lowercase, cfg.strip_accents).normalize_str
    with _bar(stats, "pass 1/2 characters") as bar:
        for batch in _batches(sources, cfg, stats, bar, COUNT_CHARS):
            text = "\n".join(batch)  # line breaks count as spaces
            part = _code_points(text)
            if part[context[context < part.size]].any():
                part = _code_points(clean(text))
                whole[:part.size] += part
            else:
                raw[:part.size] += part
    raw[0xD800:0xE000] = 0  # lone surrogates (not UTF-8 text) cannot reach Rust; the readers replace them
    counts: dict[str, int] = {}
    normalised = [(clean(chr(code)), int(raw[code])) for code in np.flatnonzero(raw)]
    for text, times in [*normalised, *((chr(code), int(whole[code])) for code in np.flatnonzero(whole))]:
        for char in text:
            if char not in _SEPARATORS:
                counts[char] = counts.get(char, 0) + times
    if not counts:
        raise UsageError(f"INPUTS hold no text: {stats.files_read} source(s) read, no character in a word")
    return counts


def _code_points(text: str) -> np.ndarray:
    """How often each code point occurs in `text`, indexed by code point (up to the highest one seen)."""
    return np.bincount(np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32))


@functools.cache
def _neighbour_dependent(lowercase: bool, strip_accents: bool | None) -> np.ndarray:
    """The code points the normaliser may change by their neighbours. Lowercasing: `Σ` (`ς` at a word's end).
    Accents kept: every character NFC may compose with the one before it (the second of a two-character
    canonical decomposition, Hangul's vowel and final jamo); with accents stripped, NFD undoes NFC and the marks
    go, so one by one gives the same characters."""
    chars = {"\u03a3"} if lowercase else set()
    if not (strip_accents or (strip_accents is None and lowercase)):
        chars.update(map(chr, (*range(0x1161, 0x1176), *range(0x11A8, 0x11C3))))
        for code in range(0x30000):  # no canonical decomposition lies further out
            parts = unicodedata.decomposition(chr(code)).split()
            if len(parts) == 2 and not parts[0].startswith("<"):
                chars.add(chr(int(parts[1], 16)))
    return np.array(sorted(map(ord, chars)), dtype=np.int64)


def choose_alphabet(counts: dict[str, int], limit: int) -> list[str]:
    """The `limit` most frequent characters (ties: lower code point first), in code point order."""
    kept = sorted(counts, key=lambda char: (-counts[char], char))[:limit]
    return sorted(kept)


def continuations(alphabet: Sequence[str]) -> list[str]:
    """`##c` for each character that can follow another inside a word after pre-tokenisation."""
    split = pre_tokenizer()
    return [CONTINUATION + c for c in alphabet if len(split.pre_tokenize_str("a" + c)) == 1]


def learn_vocab(sources: Sequence[Source], cfg: TokenizerTrainConfig, fixed: Sequence[str],
                stats: ReadStats) -> list[str]:
    """Pass 2: the trainer's vocabulary in id order, `fixed` first (ids 0..len(fixed)-1)."""
    from tokenizers import Tokenizer, models, trainers

    backend = Tokenizer(models.WordPiece(unk_token=UNK, continuing_subword_prefix=CONTINUATION))
    backend.normalizer = normalizer(cfg.lowercase, cfg.strip_accents)
    alphabet = [t for t in fixed[len(SPECIAL_TOKENS):] if not t.startswith(CONTINUATION)]
    backend.pre_tokenizer = encodable_pre_tokenizer(alphabet)
    trainer = trainers.WordPieceTrainer(
        vocab_size=cfg.vocab_size, min_frequency=cfg.min_frequency, show_progress=False,
        special_tokens=list(fixed), initial_alphabet=alphabet, limit_alphabet=len(alphabet),
        continuing_subword_prefix=CONTINUATION)
    with _bar(stats, "pass 2/2 training") as bar:
        batches = _batches(sources, cfg, stats, bar)
        backend.train_from_iterator(_then(batches, lambda: bar.set_description("learning pieces")), trainer)
    vocab = backend.get_vocab(with_added_tokens=False)
    tokens = sorted(vocab, key=vocab.__getitem__)
    if tokens[:len(fixed)] != list(fixed) or len(tokens) > cfg.vocab_size:  # a tokenizers release changed it
        raise BertctlError("the WordPiece trainer did not keep the alphabet first; report this with "
                           "your tokenizers version")
    return tokens


def _then(items: Iterator[Any], done: Any) -> Iterator[Any]:
    yield from items
    done()


def pad_vocab(tokens: list[str], size: int) -> list[str]:
    """Fill up to `size` with [unused0], [unused1]... (Google's placeholders; text never produces them)."""
    taken = set(tokens)
    extra = (f"[unused{i}]" for i in range(size * 2) if f"[unused{i}]" not in taken)
    return tokens + [next(extra) for _ in range(size - len(tokens))]


def _write_folder(out: Path, tokenizer: BertTokenizer, record: dict[str, Any], overwrite: bool) -> None:
    """Write everything into a hidden sibling folder, then rename it to `out` (never half a folder)."""
    with building_folder(out, "partial", overwrite=overwrite) as tmp:  # nor one that took its place meanwhile
        tokenizer.save(tmp)
        write_json_atomic(tmp / PROVENANCE, record)
