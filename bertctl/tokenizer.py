"""BERT's WordPiece tokenizer on the `tokenizers` library, with ids identical to Google's tokenization.

One wrapper, `BertTokenizer`, is what every other part of bertctl holds: checkpoint folders save it,
corpus building and pre-training compare its `sha256()` to refuse a mismatched vocabulary, fill decodes
with it. Reading the folders others wrote is tokenizer_folder.py's job; the clean-up and word split its
pipeline runs are built in tokenizer_pipeline.py.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import operator
import reprlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tokenizers import (
    AddedToken,
    Encoding,
    Regex,
    Tokenizer,
    decoders,
    models,
    pre_tokenizers,
    processors,
)

from bertctl.config_types import is_bool, is_list, take_bool
from bertctl.errors import BertctlError, UsageError, quoted
from bertctl.files import make_folder, user_path, write_text_atomic
from bertctl.tokenizer_pipeline import (
    MAX_WORD_CHARS,
    never_split_normalizer,
    pre_tokenizer,
    python_whitespace,
    whole_words,
)

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)  # ids 0-4 in every vocabulary bertctl trains
CONTINUATION = "##"  # WordPiece prefix of a piece that continues a word
MODEL_MAX_LENGTH = 512  # written to tokenizer_config.json; BERT's position table size

ROLES = ("pad", "unk", "cls", "sep", "mask")  # the special tokens' roles, in SPECIAL_TOKENS' order
_CLEAN_UP = [(" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
             (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")]  # transformers' clean_up_tokenization, in order


@dataclass(frozen=True)
class Added:
    """A token matched whole before the pre-tokenizer and WordPiece, as tokenizers matches transformers' added
    tokens: in the raw text, or, when `normalized`, in the text after clean-up, casing and accent stripping."""

    content: str
    id: int
    special: bool = False  # decode(skip_special_tokens=True) leaves it out
    single_word: bool = False  # only between non-word characters (tokenizers' rule; see docs/tokenizer.md)
    normalized: bool = False  # in the normalized text ("<ENT>" is "<ent>" when uncased): add_tokens' default


@dataclass(frozen=True)
class TokenizerOptions:
    """What transformers' BertTokenizer reads from tokenizer_config.json, with its defaults."""

    lowercase: bool = True  # do_lower_case
    strip_accents: bool | None = None  # None: strip when lowercasing (Google's rule)
    chinese_chars: bool = True  # tokenize_chinese_chars: every CJK ideograph a word of its own
    basic: bool = True  # do_basic_tokenize; False: WordPiece on the raw text's str.split(), nothing else
    never_split: tuple[str, ...] = ()  # words kept whole and in their case (approximated: see docs)
    specials: tuple[str, ...] = SPECIAL_TOKENS  # the pad, unk, cls, sep and mask strings
    added: tuple[Added, ...] = ()  # added tokens beyond the five specials; new ones after the vocabulary
    extras: tuple[str, ...] = ()  # additional_special_tokens: kept whole after lowercasing, like the five
    model_max_length: int | None = MODEL_MAX_LENGTH  # None: the folder declares no limit
    clean_up_spaces: bool = True  # clean_up_tokenization_spaces: decode writes "a, b." for "a , b ."
    clean_up_tokens: bool = True  # join " ." " ," " ?" " !" (" n't", ... in an added token) token by token before
    # clean_up_spaces, as transformers 5's BertTokenizer and AutoTokenizer decode; not the pure-Python class
    wordpiece_decoder: bool = True  # False: decode joins the tokens with spaces, `##` kept, as tokenizers does
    # without a decoder (AutoTokenizer taking a tokenizer.json that has none as it is)
    skip_named_only: bool = False  # decode's skip_special_tokens leaves out only the five and the extras, as the
    # pure-Python class does; else every token flagged special, as transformers 5's BertTokenizer


def build_backend(vocab: dict[str, int], options: TokenizerOptions = TokenizerOptions(),
                  specials_as_text: bool = False) -> Tokenizer:
    """The full BERT pipeline around a WordPiece vocabulary (token -> id); `specials_as_text` leaves special
    tokens no whole-word rule (see BertTokenizer.plain_text_backend)."""
    added = {token.content for token in options.added}
    for token in options.specials:
        if token not in vocab and (token not in added or token == options.specials[1]):
            raise UsageError(f"the vocabulary has no {token} token; BERT needs {' '.join(options.specials)}")
    _, unk, cls, sep, _ = options.specials
    backend = Tokenizer(models.WordPiece(vocab, unk_token=unk, continuing_subword_prefix=CONTINUATION,
                                         max_input_chars_per_word=MAX_WORD_CHARS))
    if options.basic:
        backend.normalizer, unknown_whole = never_split_normalizer(vocab, options, specials_as_text)
        whole = [*whole_words(backend.normalizer.normalize_str, options, specials_as_text), *unknown_whole]
        backend.pre_tokenizer = pre_tokenizer(options.chinese_chars, whole)
    else:  # transformers' BertTokenizer then neither cleans, cases nor splits punctuation
        backend.pre_tokenizer = pre_tokenizers.Split(Regex(f"[{python_whitespace()}]"), behavior="removed")
    backend.decoder = decoders.WordPiece(prefix=CONTINUATION, cleanup=options.clean_up_tokens) \
        if options.wordpiece_decoder else None
    _add_tokens(backend, vocab, options)
    backend.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, backend.token_to_id(cls)), (sep, backend.token_to_id(sep))])
    return backend


def _add_tokens(backend: Tokenizer, vocab: dict[str, int], options: TokenizerOptions) -> None:
    """Special and added tokens in id order, so that new ones get exactly their saved ids."""
    tokens = {token.content: token for token in options.added}
    for token in options.specials:
        tokens.setdefault(token, Added(token, vocab.get(token, -1), special=True))
    for token in sorted(tokens.values(), key=lambda t: t.id):
        new = AddedToken(token.content, single_word=token.single_word, normalized=token.normalized,
                         special=token.special)
        (backend.add_special_tokens if token.special else backend.add_tokens)([new])
        if backend.token_to_id(token.content) != token.id:
            raise UsageError(f"added token {token.content!r} has id {token.id}, but added tokens must follow the "
                             f"{len(vocab)} vocabulary entries without gaps (or repeat a vocabulary entry's id)")



def never_split_in_effect(backend: Tokenizer, options: TokenizerOptions) -> list[str]:
    """The never_split words that give some text other ids than the same tokenizer without never_split. Old
    configs list the special tokens, or plain words like `cat` that stay whole anyway."""
    if not options.basic or not options.never_split:
        return []
    plain = build_backend(backend.get_vocab(with_added_tokens=False), replace(options, never_split=()))
    return sorted(word for word in set(options.never_split) if word not in (*options.specials, *options.extras)
                  and backend.encode(word).ids != plain.encode(word).ids)


class BertTokenizer:
    """A `tokenizers.Tokenizer` (`.backend`) plus the options it was built with, saved in every format."""

    def __init__(self, backend: Tokenizer, options: TokenizerOptions = TokenizerOptions()) -> None:
        self.backend = backend
        self.options = options
        backend.no_padding()
        backend.no_truncation()
        ids = {role: backend.token_to_id(token) for role, token in zip(ROLES, options.specials, strict=True)}
        for role, token in zip(ROLES, options.specials, strict=True):
            if ids[role] is None:
                raise UsageError(f"the tokenizer has no {token} token; BERT needs {' '.join(options.specials)}")
        self._ids: dict[str, int] = ids  # type: ignore[assignment]  # every special token's id, looked up once

    @classmethod
    def from_vocab(cls, vocab: Sequence[str] | dict[str, int], lowercase: bool = True,
                   strip_accents: bool | None = None, options: TokenizerOptions | None = None) -> BertTokenizer:
        """Build from tokens in id order (or a token -> id mapping); `options` replaces the two flags."""
        mapping = _vocab_mapping(vocab)
        if options is None:
            options = TokenizerOptions(lowercase=take_bool("lowercase", lowercase),
                                       strip_accents=_bool_or_none("strip_accents", strip_accents))
        if sorted(mapping.values()) != list(range(len(mapping))):
            raise UsageError(f"vocabulary ids must run 0..{len(mapping) - 1} without gaps or repeats")
        return cls(build_backend(mapping, options), options)

    @property
    def lowercase(self) -> bool:
        return self.options.lowercase

    @property
    def strip_accents(self) -> bool | None:
        return self.options.strip_accents

    @property
    def vocab_size(self) -> int:
        """Every id, added tokens included (what the model's embedding rows must match)."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        """The id of a vocabulary or added token; None for a string that is not one."""
        if not isinstance(token, str):
            raise UsageError(f"token_to_id: give a token string, not {reprlib.repr(token)}")
        return self.backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str:
        """The token of an id; an id outside the vocabulary (a negative one too) is a one-line error, not None."""
        try:
            token = self.backend.id_to_token(token_id)
        except (TypeError, OverflowError):  # not an integer, or below 0 (or past 2^32)
            _token_id(token_id)
            token = None
        if token is None:
            raise BertctlError(f"token id {token_id} is outside the vocabulary of {self.vocab_size}")
        return token

    def special_token(self, role: str) -> str:
        """The string of a special token by role ("pad", "unk", "cls", "sep", "mask"): "[MASK]" or a custom one."""
        if role not in ROLES:
            raise UsageError(f"special token role {role!r}: choose one of {', '.join(ROLES)}")
        return self.options.specials[ROLES.index(role)]

    @property
    def pad_id(self) -> int:
        return self._ids["pad"]

    @property
    def unk_id(self) -> int:
        return self._ids["unk"]

    @property
    def cls_id(self) -> int:
        return self._ids["cls"]

    @property
    def sep_id(self) -> int:
        return self._ids["sep"]

    @property
    def mask_id(self) -> int:
        return self._ids["mask"]

    def vocab(self) -> list[str]:
        """Tokens in id order, added tokens included (ids without a token, impossible here, would raise)."""
        return [self.id_to_token(i) for i in range(self.vocab_size)]

    def plain_text_backend(self) -> Tokenizer:
        """The pipeline reading special tokens in the text as plain text, as Google's tokenizer does (corpus
        building: a literal "[MASK]" must not become the mask token). Unmatched is not enough when lowercasing:
        transformers keeps a special token such as "<mask>" or "<ent>" one word after lowercasing (`<ENT>` too)."""
        backend = build_backend(self.backend.get_vocab(with_added_tokens=False), self.options, specials_as_text=True)
        backend.encode_special_tokens = True
        return backend

    def encode(self, text: str, pair: str | None = None, add_special_tokens: bool = True) -> Encoding:
        """`[CLS] text [SEP]` (and `pair [SEP]`, segment 1) as a tokenizers Encoding: .ids, .tokens, .type_ids."""
        add_special_tokens = take_bool("add_special_tokens", add_special_tokens)
        try:
            return self.backend.encode(text, pair, add_special_tokens=add_special_tokens)
        except (TypeError, ValueError):
            require_text([text], "text")
            require_text([] if pair is None else [pair], "pair")
            raise

    def encode_batch(self, texts: Sequence[str], pairs: Sequence[str] | None = None,
                     add_special_tokens: bool = True) -> list[Encoding]:
        """Encode many texts at once (the Rust side runs them in parallel)."""
        if isinstance(texts, str) or isinstance(pairs, str):  # its characters would be encoded one by one
            raise UsageError("encode_batch: give lists of texts and pairs, not one string")
        for given in (texts, pairs) if pairs is not None else (texts,):
            if not is_list(given):  # None, a number, a dict or a DataFrame (whose keys or column names iterate)
                raise UsageError(f"encode_batch: give lists of texts and pairs, not {quoted(given, reprlib.repr)}")
        add_special_tokens = take_bool("add_special_tokens", add_special_tokens)
        texts = list(texts)
        pairs = None if pairs is None else list(pairs)  # a generator too
        if pairs is not None and len(pairs) != len(texts):
            raise UsageError(f"encode_batch: {len(texts)} texts but {len(pairs)} pairs")
        inputs = texts if pairs is None else list(zip(texts, pairs, strict=True))
        try:
            return self.backend.encode_batch(inputs, add_special_tokens=add_special_tokens)
        except (TypeError, ValueError):
            require_text(texts, "text")
            require_text(pairs or [], "pair")
            raise

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        """Text from ids; clean_up_tokenization_spaces as transformers applies it, to the whole string after the
        decoder's own token-by-token cleanup (which misses "it ' s")."""
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
            raise UsageError(f"decode: give a list of token ids, not {reprlib.repr(ids)}")
        ids = list(ids)
        skip_special_tokens = take_bool("skip_special_tokens", skip_special_tokens)
        try:
            text = self._decode(ids, skip_special_tokens)
        except (TypeError, OverflowError):  # a token id that is no integer, or a negative one (-100 labels)
            for token_id in ids:
                if _token_id(token_id) < 0:
                    raise UsageError(f"decode: token id {token_id} is negative (-100 marks a position without "
                                     "a label); leave such ids out") from None
            raise
        if not self.options.clean_up_spaces:
            return text
        for spaced, joined in _CLEAN_UP:
            text = text.replace(spaced, joined)
        return text

    def _decode(self, ids: list[Any], skip_special_tokens: bool) -> str:
        """The backend's decode; where only the named special tokens are left out, they are taken out first, so
        that a token flagged special in added_tokens_decoder alone stays, as in the pure-Python class."""
        if skip_special_tokens and self.options.skip_named_only:
            named = {*self._ids.values(), *map(self.backend.token_to_id, self.options.extras)}
            ids, skip_special_tokens = [i for i in ids if i not in named], False
        return self.backend.decode(ids, skip_special_tokens=skip_special_tokens)

    def vocab_text(self) -> str:
        """All tokens one a line in id order: vocab.txt, then the added tokens (what `sha256` hashes)."""
        return "".join(f"{token}\n" for token in self.vocab())

    def sha256(self) -> str:
        """Fingerprint of the vocabulary; corpus and pre-training refuse a tokenizer whose hash differs."""
        return hashlib.sha256(self.vocab_text().encode("utf-8")).hexdigest()

    def added_tokens(self) -> list[Added]:
        """The special and added tokens transformers keeps in added_tokens_decoder, in id order."""
        tokens = {t.content: t for t in self.options.added}
        for role, token in zip(ROLES, self.options.specials, strict=True):
            tokens.setdefault(token, Added(token, self._ids[role], True))
        return sorted(tokens.values(), key=lambda t: t.id)

    def config(self) -> dict[str, Any]:
        """tokenizer_config.json: what transformers' BertTokenizer needs to rebuild the same pipeline."""
        o = self.options
        decoder = {str(t.id): {"content": t.content, "lstrip": False, "normalized": t.normalized, "rstrip": False,
                               "single_word": t.single_word, "special": t.special} for t in self.added_tokens()}
        limit = {} if o.model_max_length is None else {"model_max_length": o.model_max_length}
        return {"tokenizer_class": "BertTokenizer", "do_lower_case": o.lowercase, "strip_accents": o.strip_accents,
                "tokenize_chinese_chars": o.chinese_chars, "do_basic_tokenize": o.basic,
                "never_split": list(o.never_split) or None, **limit,
                "clean_up_tokenization_spaces": o.clean_up_spaces, **self._special_map(),
                **({"additional_special_tokens": list(o.extras)} if o.extras else {}), "added_tokens_decoder": decoder}

    def _special_map(self) -> dict[str, str]:
        return {f"{role}_token": token for role, token in zip(ROLES, self.options.specials, strict=True)}

    def save(self, folder: Path | str) -> None:
        """Write tokenizer.json, vocab.txt, tokenizer_config.json and special_tokens_map.json into folder."""
        folder = user_path(folder, "folder")  # `~` expanded; None or a number is one line
        make_folder(folder)
        base = self.backend.get_vocab_size(with_added_tokens=False)  # vocab.txt; added tokens go in the config
        write_text_atomic(folder / "vocab.txt", "".join(f"{self.id_to_token(i)}\n" for i in range(base)))
        write_text_atomic(folder / "tokenizer.json", self.backend.to_str(pretty=True) + "\n")
        write_text_atomic(folder / "tokenizer_config.json", json.dumps(self.config(), indent=2) + "\n")
        write_text_atomic(folder / "special_tokens_map.json", json.dumps(self._special_map(), indent=2) + "\n")


def _vocab_mapping(vocab: Any) -> dict[str, int]:
    """`from_vocab`'s tokens in id order (or token -> id mapping) as a fresh dict, refusing what is neither in
    one line rather than a TypeError from tokenizers."""
    if isinstance(vocab, dict):
        mapping = dict(vocab)
    elif isinstance(vocab, Iterable) and not isinstance(vocab, (str, bytes)):
        mapping = {t: i for i, t in enumerate(vocab)}
    else:
        raise UsageError(f"from_vocab: give the tokens in id order (or a token -> id mapping), not "
                         f"{reprlib.repr(vocab)}")
    for token, token_id in mapping.items():
        if type(token) is str and type(token_id) is int:  # the common case, without the slow ABC check below
            continue
        if not isinstance(token, str):
            raise UsageError(f"from_vocab: the token of id {token_id} is {reprlib.repr(token)}, not a string")
        if not isinstance(token_id, numbers.Integral) or isinstance(token_id, bool):
            raise UsageError(f"from_vocab: token {token!r} has the id {reprlib.repr(token_id)}, not a whole number")
    return {token: int(token_id) for token, token_id in mapping.items()}


def _bool_or_none(name: str, value: Any) -> bool | None:
    if value is not None and not is_bool(value):
        raise UsageError(f"{name} must be true, false or None, got {reprlib.repr(value)}")
    return None if value is None else bool(value)


def _token_id(value: Any) -> int:
    """A token id as an int (numpy's and torch's integers too), or a one-line error saying what it is instead."""
    try:
        return operator.index(value)
    except TypeError:
        raise UsageError(f"token id {reprlib.repr(value)} is not a whole number") from None


def require_text(texts: Sequence[Any], what: str = "text") -> None:
    """Refuse, naming it (`text 2`), the first item that is not a str or not valid UTF-8, which `tokenizers`
    rejects with a TypeError. Bytes that are not UTF-8 reach Python as lone surrogates (command-line arguments,
    stdin under a C locale, files read with errors="surrogateescape")."""
    for number, text in enumerate(texts, 1):
        if not isinstance(text, str):
            raise UsageError(f"{what} {number} is {reprlib.repr(text)}, not a string")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise UsageError(f"{what} {number} is not valid UTF-8 ({text.encode('utf-8', 'replace')[:40]!r}); "
                             "convert it to UTF-8 first") from None


ENCODE_CHUNK = 4096  # texts per tokenizers call where many are encoded: its Encodings take ~190 bytes a token


def encode_rows(tokenizer: BertTokenizer, texts: Sequence[str], pair: str | None = None) -> list[dict[str, Any]]:
    """What `bertctl tokenizer encode` shows: tokens, ids and segment ids per text ([CLS]/[SEP] included)."""
    return list(iter_encoded_rows(tokenizer, texts, pair))


def iter_encoded_rows(tokenizer: BertTokenizer, texts: Sequence[str],
                      pair: str | None = None) -> Iterator[dict[str, Any]]:
    """encode_rows' rows one at a time, encoded ENCODE_CHUNK texts at once, so printing 10 MB of lines holds a
    chunk's rows, not all of them. Every text is checked first: a bad one stops the command before any output."""
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise UsageError(f"encode_rows: give a list of texts, not {reprlib.repr(texts)}")
    require_text(texts, "text")
    require_text([] if pair is None else [pair], "pair")
    for start in range(0, len(texts), ENCODE_CHUNK):
        chunk = texts[start: start + ENCODE_CHUNK]
        pairs = None if pair is None else [pair] * len(chunk)
        for text, encoding in zip(chunk, tokenizer.encode_batch(chunk, pairs), strict=True):
            row: dict[str, Any] = {"text": text} if pair is None else {"text": text, "pair": pair}
            yield {**row, "tokens": encoding.tokens, "input_ids": encoding.ids, "token_type_ids": encoding.type_ids}


def format_row(row: dict[str, Any]) -> str:
    """Tokens over their ids over their segment ids, in aligned columns."""
    columns = list(zip(row["tokens"], map(str, row["input_ids"]), map(str, row["token_type_ids"]), strict=True))
    widths = [max(map(len, column)) for column in columns]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)).rstrip()
             for cells in zip(*columns, strict=True)] if columns else ["", "", ""]
    head = row["text"] if "pair" not in row else f"{row['text']}  |  {row['pair']}"
    return "\n".join([head, *(f"  {label:<8} {line}" for label, line in zip(("tokens", "ids", "segments"),
                                                                             lines, strict=True))])


def truncate_pair(a: list[int], b: list[int] | None, max_tokens: int) -> tuple[list[int], list[int] | None]:
    """Google's `_truncate_seq_pair`: drop the last token of the longer text until both fit together."""
    if b is None:
        return a[:max_tokens], None
    a, b = list(a), list(b)
    while len(a) + len(b) > max_tokens:
        (a if len(a) > len(b) else b).pop()
    return a, b
