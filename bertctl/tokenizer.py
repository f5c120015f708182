"""BERT's WordPiece tokenizer on the `tokenizers` library, with ids identical to Google's tokenization.

One wrapper, `BertTokenizer`, is what every other part of bertctl holds: checkpoint folders save it,
corpus building and pre-training compare its `sha256()` to refuse a mismatched vocabulary, fill decodes
with it. `load_tokenizer` reads every folder flavour (tokenizer.json, or Google's bare vocab.txt).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tokenizers import (
    AddedToken,
    Encoding,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
)

from bertctl.errors import BertctlError, UsageError
from bertctl.files import write_text_atomic

log = logging.getLogger(__name__)

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)  # ids 0-4 in every vocabulary bertctl trains
CONTINUATION = "##"  # WordPiece prefix of a piece that continues a word
MAX_WORD_CHARS = 100  # longer words become [UNK], as in Google's tokenization.py
MODEL_MAX_LENGTH = 512  # written to tokenizer_config.json; BERT's position table size

# The reference (transformers' pure-Python BasicTokenizer) decides with Python's unicodedata. The Rust
# BertNormalizer/BertPreTokenizer use older tables (they keep unassigned code points, miss newer marks and
# punctuation, and stop CJK at U+2B81F), so every such step is an Oniguruma regex here. Oniguruma knows a
# newer Unicode than Python 3.11's 14.0, so the unassigned (Cn) and nonspacing mark (Mn) classes are
# spelled out from the running Python's unicodedata.
_CONTROL = r"[\x{{FFFD}}\p{{C}}{unassigned}&&[^\t\n\r]]"  # removed, like _is_control (C*) plus U+FFFD
_SPACE = r"[\t\n\r\p{Zs}&&[^ ]]"  # become " ", like _is_whitespace (" " itself is left alone: faster)
_SPLIT = r" \x{2028}\x{2029}"  # what str.split() still splits on after the clean-up
_CHINESE = (r"\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2CEAF}"
            r"\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}")  # _is_chinese_char: each one its own word
_PUNCT = r"\p{P}\x{21}-\x{2F}\x{3A}-\x{40}\x{5B}-\x{60}\x{7B}-\x{7E}"  # _is_punctuation: likewise
# A piece is a run of other characters, or one CJK/punctuation character (one regex: 2x faster than 3).
_PIECE = f"[^{_SPLIT}{_CHINESE}{_PUNCT}]+|[{_CHINESE}{_PUNCT}]"
# Python's str.lower() turns a word-final capital sigma into "ς"; Rust lowercases char by char ("σ").
_FINAL_SIGMA = r"(?<=\p{Cased}|\p{Cased}\p{Case_Ignorable})Σ(?!\p{Case_Ignorable}*\p{Cased})"


def normalizer(lowercase: bool, strip_accents: bool | None) -> normalizers.Normalizer:
    """BasicTokenizer's clean-up in its order: drop controls, NFC, lowercase, strip accents (CJK: pre_tokenizer)."""
    steps = [normalizers.Replace(Regex(_CONTROL.format(unassigned=_python_class("Cn"))), ""),
             normalizers.Replace(Regex(_SPACE), " "),
             normalizers.NFC()]
    if lowercase:
        steps += [normalizers.Replace(Regex(_FINAL_SIGMA), "ς"), normalizers.Lowercase()]
    if strip_accents or (strip_accents is None and lowercase):
        steps += [normalizers.NFD(), normalizers.Replace(Regex(f"[{_python_class('Mn')}]"), "")]
    return normalizers.Sequence(steps)


@functools.cache
def _python_class(category: str) -> str:
    """Python's code points of a category as a regex class body (planes 4-13 are unassigned, Cn)."""
    ranges, start = [], None
    for code in (*range(0x40000), *range(0xE0000, 0xF0000), -1):
        if code >= 0 and unicodedata.category(chr(code)) == category:
            start = code if start is None else start
        elif start is not None:
            ranges.append(f"\\x{{{start:X}}}-\\x{{{code - 1 if code >= 0 else 0xEFFFF:X}}}")
            start = None
    return "".join(ranges)


def pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    """Split on whitespace and around every CJK ideograph and punctuation character."""
    return pre_tokenizers.Split(Regex(_PIECE), behavior="removed", invert=True)


def build_backend(vocab: dict[str, int], lowercase: bool, strip_accents: bool | None) -> Tokenizer:
    """The full BERT pipeline around a WordPiece vocabulary (token -> id)."""
    for token in SPECIAL_TOKENS:
        if token not in vocab:
            raise UsageError(f"the vocabulary has no {token} token; BERT needs {' '.join(SPECIAL_TOKENS)}")
    backend = Tokenizer(models.WordPiece(vocab, unk_token=UNK, continuing_subword_prefix=CONTINUATION,
                                         max_input_chars_per_word=MAX_WORD_CHARS))
    backend.normalizer = normalizer(lowercase, strip_accents)
    backend.pre_tokenizer = pre_tokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single=f"{CLS}:0 $A:0 {SEP}:0", pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
        special_tokens=[(CLS, vocab[CLS]), (SEP, vocab[SEP])])
    backend.decoder = decoders.WordPiece(prefix=CONTINUATION)
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return backend


class BertTokenizer:
    """A `tokenizers.Tokenizer` (`.backend`) plus the casing it was built with, saved in every format."""

    def __init__(self, backend: Tokenizer, lowercase: bool, strip_accents: bool | None = None) -> None:
        self.backend = backend
        self.lowercase = lowercase
        self.strip_accents = strip_accents
        backend.no_padding()
        backend.no_truncation()
        for token in SPECIAL_TOKENS:
            if backend.token_to_id(token) is None:
                raise UsageError(f"the tokenizer has no {token} token; BERT needs {' '.join(SPECIAL_TOKENS)}")

    @classmethod
    def from_vocab(cls, vocab: Sequence[str] | dict[str, int], lowercase: bool = True,
                   strip_accents: bool | None = None) -> BertTokenizer:
        """Build from tokens in id order (or a token -> id mapping)."""
        mapping = vocab if isinstance(vocab, dict) else {t: i for i, t in enumerate(vocab)}
        if sorted(mapping.values()) != list(range(len(mapping))):
            raise UsageError(f"vocabulary ids must run 0..{len(mapping) - 1} without gaps or repeats")
        return cls(build_backend(dict(mapping), lowercase, strip_accents), lowercase, strip_accents)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str:
        token = self.backend.id_to_token(token_id)
        if token is None:
            raise BertctlError(f"token id {token_id} is outside the vocabulary of {self.vocab_size}")
        return token

    def _special(self, token: str) -> int:
        token_id = self.backend.token_to_id(token)
        assert token_id is not None  # checked in __init__
        return token_id

    @property
    def pad_id(self) -> int:
        return self._special(PAD)

    @property
    def unk_id(self) -> int:
        return self._special(UNK)

    @property
    def cls_id(self) -> int:
        return self._special(CLS)

    @property
    def sep_id(self) -> int:
        return self._special(SEP)

    @property
    def mask_id(self) -> int:
        return self._special(MASK)

    def vocab(self) -> list[str]:
        """Tokens in id order (ids without a token, impossible in a valid vocab, would raise)."""
        return [self.id_to_token(i) for i in range(self.vocab_size)]

    def encode(self, text: str, pair: str | None = None, add_special_tokens: bool = True) -> Encoding:
        return self.backend.encode(text, pair, add_special_tokens=add_special_tokens)

    def encode_batch(self, texts: Sequence[str], pairs: Sequence[str] | None = None,
                     add_special_tokens: bool = True) -> list[Encoding]:
        """Encode many texts at once (the Rust side runs them in parallel)."""
        if pairs is None:
            return self.backend.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        if len(pairs) != len(texts):
            raise UsageError(f"encode_batch: {len(texts)} texts but {len(pairs)} pairs")
        return self.backend.encode_batch(list(zip(texts, pairs, strict=True)), add_special_tokens=add_special_tokens)

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def vocab_text(self) -> str:
        """vocab.txt exactly as `save` writes it: one token a line, in id order."""
        return "".join(f"{token}\n" for token in self.vocab())

    def sha256(self) -> str:
        """Fingerprint of the vocabulary; corpus and pre-training refuse a tokenizer whose hash differs."""
        return hashlib.sha256(self.vocab_text().encode("utf-8")).hexdigest()

    def config(self) -> dict[str, Any]:
        """tokenizer_config.json: what transformers' BertTokenizer needs to rebuild the same pipeline."""
        return {"tokenizer_class": "BertTokenizer", "do_lower_case": self.lowercase,
                "strip_accents": self.strip_accents, "tokenize_chinese_chars": True, "do_basic_tokenize": True,
                "model_max_length": MODEL_MAX_LENGTH, **_special_map()}

    def save(self, folder: Path | str) -> None:
        """Write tokenizer.json, vocab.txt, tokenizer_config.json and special_tokens_map.json into folder."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        write_text_atomic(folder / "vocab.txt", self.vocab_text())
        write_text_atomic(folder / "tokenizer.json", self.backend.to_str(pretty=True) + "\n")
        write_text_atomic(folder / "tokenizer_config.json", json.dumps(self.config(), indent=2) + "\n")
        write_text_atomic(folder / "special_tokens_map.json", json.dumps(_special_map(), indent=2) + "\n")


def _special_map() -> dict[str, str]:
    return {"unk_token": UNK, "sep_token": SEP, "pad_token": PAD, "cls_token": CLS, "mask_token": MASK}


def has_tokenizer(folder: Path | str) -> bool:
    """True when folder holds a tokenizer bertctl can load (tokenizer.json or vocab.txt)."""
    folder = Path(folder)
    return (folder / "tokenizer.json").is_file() or (folder / "vocab.txt").is_file()


def read_vocab_file(path: Path) -> list[str]:
    """Google's vocab.txt: one token a line, the line number is the id (read as transformers reads it)."""
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            tokens = [line[:-1] if line.endswith("\n") else line for line in handle]
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read vocabulary {path}: {getattr(exc, 'strerror', None) or exc}") from None
    seen: dict[str, int] = {}
    for i, token in enumerate(tokens):
        if token in seen:
            raise UsageError(f"{path}: line {i + 1} repeats token {token!r} of line {seen[token] + 1}; "
                             "ids would be ambiguous")
        seen[token] = i
    if not tokens:
        raise UsageError(f"{path} is empty; a vocab.txt has one token a line")
    return tokens


def _read_casing(folder: Path) -> tuple[bool | None, bool | None]:
    """(do_lower_case, strip_accents) from tokenizer_config.json when the folder has one."""
    path = folder / "tokenizer_config.json"
    if not path.is_file():
        return None, None
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    lower = values.get("do_lower_case")
    return (bool(lower) if lower is not None else None), values.get("strip_accents")


def _casing_of(backend: Tokenizer) -> tuple[bool, bool | None]:
    """Casing of a tokenizer.json's normalizer: a BertNormalizer's flags, or our Sequence's steps."""
    state = json.loads(backend.to_str()).get("normalizer") or {}
    parts = state.get("normalizers", [state]) if state.get("type") == "Sequence" else [state]
    for part in parts:
        if part.get("type") == "BertNormalizer":
            return bool(part.get("lowercase")), part.get("strip_accents")
    lowercase = any(part.get("type") == "Lowercase" for part in parts)
    strip = any(part.get("type") in ("NFD", "StripAccents") for part in parts)
    return lowercase, (None if strip == lowercase else strip)


def _check_casing(tokens: Sequence[str], lowercase: bool, source: Path) -> None:
    """Warn when the vocabulary's letters disagree with the casing (uncased flag on a cased vocab...)."""
    words = [t for t in tokens if t[:1] != "[" and any(c.isalpha() for c in t)]
    capitals = sum(1 for t in words if t != t.lower())
    if lowercase and capitals > max(10, len(words) // 50):
        log.warning("warning: %s has %d tokens with capitals but the tokenizer lowercases its input; "
                    "they can never be produced (pass --cased if the vocabulary is cased)", source, capitals)
    elif not lowercase and len(words) >= 100 and capitals == 0:
        log.warning("warning: %s has no token with a capital but the tokenizer keeps case; capitalised "
                    "words will split badly (pass --lowercase if the vocabulary is uncased)", source)


def load_tokenizer(path: Path | str, lowercase: bool | None = None) -> BertTokenizer:
    """A folder with tokenizer.json, a folder with Google's vocab.txt, or a vocab.txt file.

    Casing of a bare vocab.txt comes from tokenizer_config.json's do_lower_case, else `lowercase`, else
    lowercase (as Google's uncased models). A tokenizer.json carries its own casing.
    """
    path = Path(path)
    if path.is_dir() and (path / "tokenizer.json").is_file():
        return _load_json(path / "tokenizer.json", lowercase)
    if path.is_file() and path.suffix == ".json":
        return _load_json(path, lowercase)
    vocab_path = path / "vocab.txt" if path.is_dir() else path
    if not vocab_path.is_file():
        what = "has no tokenizer.json or vocab.txt" if path.is_dir() else "does not exist"
        raise UsageError(f"tokenizer {path} {what}; give a tokenizer folder or a vocab.txt")
    file_lower, strip_accents = _read_casing(vocab_path.parent)
    if file_lower is not None and lowercase is not None and file_lower != lowercase:
        log.warning("warning: %s says do_lower_case=%s; using the %s flag instead", vocab_path.parent /
                    "tokenizer_config.json", file_lower, "--lowercase" if lowercase else "--cased")
    use_lower = lowercase if lowercase is not None else (file_lower if file_lower is not None else True)
    tokens = read_vocab_file(vocab_path)
    _check_casing(tokens, use_lower, vocab_path)
    return BertTokenizer.from_vocab(tokens, use_lower, strip_accents)


def _load_json(path: Path, lowercase: bool | None) -> BertTokenizer:
    """Read a tokenizer.json for its vocabulary and casing; the pipeline around them is always ours."""
    try:
        backend = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception for malformed files
        raise UsageError(f"cannot read tokenizer {path}: {str(exc).splitlines()[0]}") from None
    model = backend.model
    if not isinstance(model, models.WordPiece) or model.continuing_subword_prefix != CONTINUATION:
        raise UsageError(f"{path} is not a BERT WordPiece tokenizer (with '##' continuations)")
    file_lower, strip_accents = _read_casing(path.parent)
    if file_lower is None:
        file_lower, strip_accents = _casing_of(backend)
    if lowercase is not None and lowercase != file_lower:
        log.warning("warning: %s fixes the casing (lowercase=%s); the %s flag is ignored", path, file_lower,
                    "--lowercase" if lowercase else "--cased")
    vocab = backend.get_vocab(with_added_tokens=True)
    _check_casing(list(vocab), file_lower, path)
    return BertTokenizer.from_vocab(vocab, file_lower, strip_accents)


def encode_rows(tokenizer: BertTokenizer, texts: Sequence[str], pair: str | None = None) -> list[dict[str, Any]]:
    """What `bertctl tokenizer encode` shows: tokens, ids and segment ids per text ([CLS]/[SEP] included)."""
    pairs = None if pair is None else [pair] * len(texts)
    rows = []
    for text, encoding in zip(texts, tokenizer.encode_batch(texts, pairs), strict=True):
        row: dict[str, Any] = {"text": text} if pair is None else {"text": text, "pair": pair}
        rows.append({**row, "tokens": encoding.tokens, "input_ids": encoding.ids,
                     "token_type_ids": encoding.type_ids})
    return rows


def format_row(row: dict[str, Any]) -> str:
    """Tokens over their ids over their segment ids, in aligned columns."""
    columns = list(zip(row["tokens"], map(str, row["input_ids"]), map(str, row["token_type_ids"]), strict=True))
    widths = [max(map(len, column)) for column in columns]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)).rstrip()
             for cells in zip(*columns, strict=True)] if columns else ["", "", ""]
    head = row["text"] if "pair" not in row else f"{row['text']}  |  {row['pair']}"
    return "\n".join([head, *(f"  {label:<8} {line}" for label, line in zip(("tokens", "ids", "segments"),
                                                                             lines, strict=True))])
