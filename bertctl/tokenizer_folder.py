"""Reading tokenizer folders the way transformers' `BertTokenizer.from_pretrained` reads them.

Every flavour: Google's bare vocab.txt, transformers' folders of any version (tokenizer_config.json options,
special_tokens_map.json, added_tokens.json, added_tokens_decoder), tokenizer.json-only folders and hub ids.
"""

from __future__ import annotations

import json
import logging
import reprlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from bertctl.config_types import is_bool
from bertctl.errors import UsageError
from bertctl.files import refuse_empty
from bertctl.run_folder import run_folder_hint
from bertctl.tokenizer import CONTINUATION, ROLES, SPECIAL_TOKENS, Added, BertTokenizer, TokenizerOptions

log = logging.getLogger(__name__)

_ADD_ORDER = ("unk", "sep", "pad", "cls", "mask")  # transformers appends missing special tokens in this order
_NO_LIMIT = 10**20  # a model_max_length above this is transformers' "no limit" sentinel (int(1e30))
_LEGACY_CLASS = "BertTokenizerLegacy"  # transformers 5's pure-Python class: vocab.txt first, and a missing
# clean_up_tokenization_spaces is true (false in its BertTokenizer, AutoTokenizer and fill-mask pipeline)


def has_tokenizer(folder: Path | str) -> bool:
    """True when folder holds a tokenizer bertctl can load (tokenizer.json or vocab.txt)."""
    folder = Path(folder)
    return (folder / "tokenizer.json").is_file() or (folder / "vocab.txt").is_file()


def _corpus_hint(folder: Path) -> str | None:
    """Where a corpus folder, given for a tokenizer, keeps the copy of the tokenizer it was built with."""
    if (folder / "manifest.json").is_file() and has_tokenizer(folder / "tokenizer"):
        return f"it is a corpus folder: give its tokenizer {folder / 'tokenizer'}"
    return None


def _quickstart_hint(folder: Path) -> str | None:
    """Where a quick-start run folder keeps the tokenizer it trained: there before the run's first checkpoint,
    and the same files as the checkpoints' own. Named, not said to be a quick start's: any folder may have one."""
    if has_tokenizer(folder / "data" / "tokenizer"):
        return (f"give the tokenizer in it, {folder / 'data' / 'tokenizer'} (where a quick-start run keeps the one it "
                "trained)")
    return None


def read_vocab_file(path: Path) -> list[str]:
    """Google's vocab.txt: one token a line, the line number is the id (read as transformers reads it).

    Lines end at "\\n"; a "\\r" before it (a file saved with Windows line ends) is no part of the token, as
    in Google's tokenization.py and both transformers tokenizers."""
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            lines = handle.read().split("\n")
        tokens = [line.removesuffix("\r") for line in (lines if lines[-1] else lines[:-1])]
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read vocabulary {path}: {getattr(exc, 'strerror', None) or exc}") from None
    seen: dict[str, int] = {}
    for i, token in enumerate(tokens):
        if token in seen:
            raise UsageError(f"{path}, read as a vocab.txt (one token a line): line {i + 1} repeats token "
                             f"{token!r} of line {seen[token] + 1}; ids would be ambiguous")
        seen[token] = i
    if not tokens:
        raise UsageError(f"{path} is empty; a vocab.txt has one token a line")
    return tokens


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object file, {} when it does not exist."""
    if not path.is_file():
        return {}
    refuse_empty(path)
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    if not isinstance(value, dict):
        raise UsageError(f"cannot read {path}: not a JSON object")
    return value


def _token_text(value: Any) -> str | None:
    """A token as tokenizer files write it: a string, or an AddedToken dict with its "content"."""
    value = value.get("content") if isinstance(value, dict) else value
    return value if isinstance(value, str) and value else None


def _added(value: Any, index: int) -> Added:
    """An added token from its saved dict; a missing "normalized" is `not special`, as in transformers'
    AddedToken (tokenizer.json always has it)."""
    if isinstance(value, dict):
        special, single_word = bool(value.get("special", False)), bool(value.get("single_word", False))
        return Added(_token_text(value) or "", index, special, single_word, bool(value.get("normalized", not special)))
    return Added(str(value), index)


def _extras(config: dict[str, Any]) -> list[str]:
    """additional_special_tokens (extra_special_tokens since transformers 5) as strings."""
    extra = config.get("extra_special_tokens") or []
    values = [*(config.get("additional_special_tokens") or []), *(extra.values() if isinstance(extra, dict) else extra)]
    return [t for t in map(_token_text, values) if t]


def _folder_settings(folder: Path, tokenizer_json: dict[str, Any] | None) -> tuple[dict[str, Any], dict[int, Added]]:
    """tokenizer_config.json and the added tokens by id, merged with the legacy files as from_pretrained does:
    added_tokens_decoder when the config has one, else special_tokens_map.json (it wins), added_tokens.json
    and tokenizer.json's added_tokens. Each token keeps its saved "normalized" flag, as AutoTokenizer does."""
    config = _read_json(folder / "tokenizer_config.json")
    config["tokenizer_class"] = _tokenizer_class(folder, config)
    if "added_tokens_decoder" in config:
        added = {int(i): _added(t, int(i)) for i, t in (config["added_tokens_decoder"] or {}).items()}
    else:
        added = _legacy_added(folder, config, tokenizer_json)
    if config.get("tokenizer_class") == _LEGACY_CLASS:  # AutoTokenizer loads transformers 5's pure-Python
        added = {i: replace(t, normalized=False) for i, t in added.items()}  # class: it matches in the raw text
    return config, added


def _tokenizer_class(folder: Path, config: dict[str, Any]) -> Any:
    """The class AutoTokenizer, and so the fill-mask pipeline, loads the folder with: tokenizer_config.json's
    tokenizer_class, else config.json's, else BertTokenizer where config.json says model_type bert (a model
    folder); None for a folder naming none. The class decides who sets the casing (see _vocabulary)."""
    if config.get("tokenizer_class"):  # config.json is then not read (a tokenizer folder may hold any)
        return config["tokenizer_class"]
    model = _read_json(folder / "config.json")
    return model.get("tokenizer_class") or ("BertTokenizer" if model.get("model_type") == "bert" else None)


def _legacy_added(folder: Path, config: dict[str, Any], tokenizer_json: dict[str, Any] | None) -> dict[int, Added]:
    """special_tokens_map.json merged into config, then added_tokens.json and tokenizer.json's added_tokens.

    An added_tokens.json entry is special (and then not normalized) where transformers 5 flags it so: a named
    token or an extra_special_tokens one (or the config's additional_special_tokens), not one listed only in
    special_tokens_map.json's additional_special_tokens: that is a plain, normalized token, which its
    BertTokenizer's decode keeps (the pure-Python class leaves it out: see TokenizerOptions.skip_named_only)."""
    special_map = _read_json(folder / "special_tokens_map.json")
    flagged = set(_extras(config)) | set(_extras({"extra_special_tokens": special_map.get("extra_special_tokens")}))
    for key, value in special_map.items():
        config[key] = [*(config.get(key) or []), *value] if key.endswith("special_tokens") else value
    specials = flagged | {_token_text(config.get(f"{role}_token")) for role in ROLES}
    added = {int(i): Added(t, int(i), t in specials, normalized=t not in specials)
             for t, i in _read_json(folder / "added_tokens.json").items()}
    for token in (tokenizer_json or {}).get("added_tokens") or []:
        added[int(token["id"])] = _added(token, int(token["id"]))
    return added


def _options(config: dict[str, Any], added: dict[int, Added], vocab: dict[str, int],
             fallback: dict[str, Any]) -> TokenizerOptions:
    """The options transformers' BertTokenizer(**config) would use; `fallback` fills keys the config lacks."""
    def get(key: str, default: Any) -> Any:
        return config[key] if config.get(key) is not None else fallback.get(key, default)

    specials = tuple(_token_text(config.get(f"{r}_token")) or t for r, t in zip(ROLES, SPECIAL_TOKENS, strict=True))
    tokens = {t.content: t for t in added.values() if t.content}
    size = len(set(vocab) | set(tokens))
    for token in [specials[ROLES.index(role)] for role in _ADD_ORDER] + _extras(config):
        if token not in tokens:  # transformers marks these special, appending those not in the vocabulary
            tokens[token] = Added(token, vocab.get(token, size), special=True)
            size += token not in vocab
    limit = config.get("model_max_length", config.get("max_len"))
    legacy = config.get("tokenizer_class") == _LEGACY_CLASS
    clean_up = bool(config.get("clean_up_tokenization_spaces", legacy))  # missing: false but in the pure-Python
    # class; null: false in both (their `self.clean_up_tokenization_spaces` is then None)
    return TokenizerOptions(
        lowercase=bool(get("do_lower_case", True)), strip_accents=get("strip_accents", None),
        chinese_chars=bool(get("tokenize_chinese_chars", True)), basic=bool(get("do_basic_tokenize", True)),
        never_split=tuple(str(t) for t in config.get("never_split") or ()), specials=specials,
        added=tuple(t for t in tokens.values() if t.content not in specials or t.content not in vocab),
        extras=tuple(dict.fromkeys(_extras(config))),
        model_max_length=limit if isinstance(limit, int) and 0 < limit < _NO_LIMIT else None,
        clean_up_spaces=clean_up, clean_up_tokens=not legacy and fallback.get("decoder_cleanup", True),
        wordpiece_decoder=fallback.get("wordpiece_decoder", True), skip_named_only=legacy)


def _casing_of(tokenizer_json: dict[str, Any]) -> dict[str, Any]:
    """A tokenizer.json's normalizer as config keys: a BertNormalizer's flags, or our Sequence's steps."""
    state = tokenizer_json.get("normalizer") or {}
    parts = state.get("normalizers", [state]) if state.get("type") == "Sequence" else [state]
    for part in parts:
        if part.get("type") == "BertNormalizer":
            return {"do_lower_case": bool(part.get("lowercase")), "strip_accents": part.get("strip_accents"),
                    "tokenize_chinese_chars": bool(part.get("handle_chinese_chars", True))}
    lowercase = any(part.get("type") == "Lowercase" for part in parts)
    strip = any(part.get("type") in ("NFD", "StripAccents") for part in parts)
    chinese = "4E00" in json.dumps(tokenizer_json.get("pre_tokenizer")) or not parts
    return {"do_lower_case": lowercase, "strip_accents": None if strip == lowercase else strip,
            "tokenize_chinese_chars": chinese}


def _json_casing(tokenizer_json: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """_casing_of for the keys the config lacks, with the file's decoder (its clean-up flag, or none at all), unless
    the config's keys change what the file does: then the config is read as BertTokenizer(**config) reads it
    (lowercase, strip_accents null, Chinese characters split, its own WordPiece decoder), since the config's
    lowercasing with the file's `strip_accents: false`, or its split with the file's casing, would cut text as no
    transformers class does.
    Either way the folder reads as one of them: AutoTokenizer takes the file, BertTokenizer the config."""
    casing = _casing_of(tokenizer_json)
    lower, strip = (casing[k] if config.get(k) is None else config[k] for k in ("do_lower_case", "strip_accents"))
    chinese = casing["tokenize_chinese_chars"] if config.get("tokenize_chinese_chars") is None \
        else bool(config["tokenize_chinese_chars"])
    file_lower = casing["do_lower_case"]
    if (bool(lower), _strips(lower, strip), chinese) == (file_lower, _strips(file_lower, casing["strip_accents"]),
                                                          casing["tokenize_chinese_chars"]):
        return {**casing, "decoder_cleanup": _decoder_cleanup(tokenizer_json),
                "wordpiece_decoder": bool(tokenizer_json.get("decoder"))}
    return {"do_lower_case": True, "strip_accents": None, "tokenize_chinese_chars": True, "decoder_cleanup": True}


def _strips(do_lower_case: Any, strip_accents: Any) -> bool:
    """Whether accents are stripped: strip_accents, or when it is null, lowercasing (Google's rule)."""
    return bool(do_lower_case if strip_accents is None else strip_accents)


def _check_casing(tokens: Sequence[str], lowercase: bool, source: Path) -> None:
    """Warn when the vocabulary's letters disagree with the casing (uncased flag on a cased vocab...)."""
    words = [t for t in tokens if t[:1] != "[" and any(map(str.isalpha, t))]
    capitals = sum(1 for t in words if t != t.lower())
    if lowercase and capitals > max(10, len(words) // 50):
        log.warning("warning: %s has %d tokens with capitals but the tokenizer lowercases its input; "
                    "they can never be produced (if the vocabulary is cased: --cased where the command has it, "
                    'else {"do_lower_case": false} in %s)', source, capitals, source.parent / "tokenizer_config.json")
    elif not lowercase and len(words) >= 100 and capitals == 0:
        log.warning("warning: %s has no token with a capital but the tokenizer keeps case; capitalised "
                    "words will split badly (if the vocabulary is uncased: --lowercase where the command has it, "
                    'else {"do_lower_case": true} in %s)', source, source.parent / "tokenizer_config.json")


def _warn_unapplied(config: dict[str, Any], where: Path) -> None:
    """Two settings transformers' tokenizers apply and bertctl does not: cutting a text on the left, and special
    tokens written in the text read as text (AutoTokenizer applies it, the pure-Python BertTokenizer does not)."""
    if config.get("truncation_side") == "left":
        log.warning("warning: %s says truncation_side=left; bertctl cuts a text that is too long at its end, "
                    "keeping its first tokens, as Google's BERT does (transformers keeps the last ones)", where)
    if config.get("split_special_tokens") is True:
        log.warning("warning: %s says split_special_tokens=true; bertctl reads [SEP], [MASK], ... in a text as "
                    "the special tokens, as transformers' pure-Python BertTokenizer does", where)


def load_tokenizer(path: Path | str, lowercase: bool | None = None) -> BertTokenizer:
    """A tokenizer folder (vocab.txt and/or tokenizer.json), a vocab.txt or a tokenizer.json, read as
    transformers' `BertTokenizer.from_pretrained` reads it: tokenizer.json's vocabulary first (see _vocabulary),
    every option of tokenizer_config.json, special and added tokens.

    `lowercase` (the --lowercase/--cased flag) decides where the files leave the casing to BertTokenizer's
    default (a bare vocab.txt, a tokenizer.json read as BertTokenizer, neither with do_lower_case): it overrides
    a bare vocab.txt's config with a warning, and is ignored (with a warning) where a tokenizer.json's
    normalizer, or a do_lower_case beside a tokenizer.json, sets the casing.
    A hub id (`bert-base-uncased`) is read from the Hugging Face cache, or fetched when online.
    """
    from bertctl.hub import local_folder

    if lowercase is not None and not is_bool(lowercase):  # "no" would read as true
        raise UsageError(f"lowercase must be true, false or None, got {reprlib.repr(lowercase)}")
    lowercase = None if lowercase is None else bool(lowercase)
    given, path = path, local_folder(path, weights=False)
    if path.is_dir():
        json_path, vocab_path = path / "tokenizer.json", path / "vocab.txt"
        if not json_path.is_file() and not vocab_path.is_file():
            hint = (_quickstart_hint(path) or run_folder_hint(path) or _corpus_hint(path)
                    or "give a tokenizer folder or a vocab.txt")
            raise UsageError(f"tokenizer {path} has no tokenizer.json or vocab.txt; {hint}")
    elif path.is_file():
        json_path, vocab_path = (path, None) if path.suffix == ".json" else (None, path)
    else:
        raise UsageError(f"tokenizer {given} does not exist; give a tokenizer folder or a vocab.txt")  # as spelt
    tokenizer_json = _read_tokenizer_json(json_path) if json_path and json_path.is_file() else None
    folder = path if path.is_dir() else path.parent
    try:
        config, added = _folder_settings(folder, tokenizer_json)
    except _ODD_SETTING as exc:
        raise _odd_settings(folder, exc) from None
    vocab_path = vocab_path if vocab_path is not None and vocab_path.is_file() else None
    source, vocab, fallback = _vocabulary(vocab_path, json_path, tokenizer_json, config)
    _apply_casing_flag(config, lowercase, fallback, source, fixed=tokenizer_json is not None)
    try:
        options = _options(config, added, vocab, fallback)
    except _ODD_SETTING as exc:
        raise _odd_settings(source.parent, exc) from None
    if options.basic:
        _check_casing(list(vocab), options.lowercase, source)
    _warn_unapplied(config, source.parent / "tokenizer_config.json")
    try:
        return BertTokenizer.from_vocab(vocab, options=options)
    except UsageError as exc:
        raise UsageError(f"tokenizer {source}: {exc}") from None


def _apply_casing_flag(config: dict[str, Any], lowercase: bool | None, fallback: dict[str, Any], source: Path,
                       fixed: bool) -> None:
    """The --lowercase/--cased flag into `config` where the files leave the casing open, or over a bare vocab.txt's
    config with a warning; a folder with a tokenizer.json (`fixed`) keeps a casing its files set, with a warning."""
    file_lower = config.get("do_lower_case", fallback.get("do_lower_case"))
    if lowercase is not None and file_lower is not None and bool(file_lower) != lowercase:
        where = source.parent / "tokenizer_config.json" if "do_lower_case" in config else source
        if fixed:
            log.warning("warning: %s fixes the casing (do_lower_case=%s); the %s flag is ignored", where,
                        bool(file_lower), "--lowercase" if lowercase else "--cased")
        else:
            log.warning("warning: %s says do_lower_case=%s; using the %s flag instead", where, bool(file_lower),
                        "--lowercase" if lowercase else "--cased")
            config["do_lower_case"] = lowercase
    elif lowercase is not None and file_lower is None:
        config["do_lower_case"] = lowercase


def _vocabulary(vocab_path: Path | None, json_path: Path | None, tokenizer_json: dict[str, Any] | None,
                config: dict[str, Any]) -> tuple[Path, dict[str, int], dict[str, Any]]:
    """The file the vocabulary comes from, the vocabulary, and the casing for keys the config lacks (with the
    file's decoder cleanup flag where the file is read as AutoTokenizer takes it).

    tokenizer.json's vocabulary wins over a vocab.txt beside it, as AutoTokenizer, BertTokenizer and
    BertTokenizerFast read it; only the pure-Python BertTokenizerLegacy (a folder naming it) reads vocab.txt.
    The tokenizer.json's normalizer gives the casing unless the folder is loaded as a BERT class (named, or a
    model's config.json), whose defaults (lowercase) then apply as those classes rebuild the normalizer from the
    config, or a vocab.txt is there and no class is named (BertTokenizer's defaults too; AutoTokenizer takes the
    normalizer there, as where a class such as PreTrainedTokenizerFast is named)."""
    named = config.get("tokenizer_class")
    legacy = named == _LEGACY_CLASS
    if vocab_path is not None and (tokenizer_json is None or legacy):
        return vocab_path, {t: i for i, t in enumerate(read_vocab_file(vocab_path))}, {}
    assert tokenizer_json is not None and json_path is not None
    vocab = tokenizer_json["model"]["vocab"]
    if vocab_path is not None:
        _warn_stale_vocab(vocab_path, vocab)
    bert_defaults = named in ("BertTokenizer", "BertTokenizerFast") or (vocab_path is not None and named is None)
    if bert_defaults:
        return json_path, vocab, {}
    return json_path, vocab, _json_casing(tokenizer_json, config)


def _decoder_cleanup(tokenizer_json: dict[str, Any]) -> bool:
    """The file's WordPiece decoder `cleanup` flag: AutoTokenizer decodes with the file's decoder where it takes
    the file as it is (the BERT classes rebuild it with cleanup on)."""
    decoder = tokenizer_json.get("decoder") or {}
    return decoder.get("type") != "WordPiece" or bool(decoder.get("cleanup", True))


def _warn_stale_vocab(vocab_path: Path, vocab: dict[str, int]) -> None:
    """A vocab.txt that lists other tokens than the tokenizer.json beside it: Google's code and the pure-Python
    tokenizer would read other ids from the same folder than transformers' AutoTokenizer and bertctl."""
    try:
        same = read_vocab_file(vocab_path) == sorted(vocab, key=vocab.__getitem__)
    except UsageError:  # repeated tokens, not UTF-8: transformers does not read it either
        same = False
    if not same:
        log.warning("warning: %s lists other tokens than the tokenizer.json beside it; using tokenizer.json's "
                    "vocabulary, as transformers' AutoTokenizer does", vocab_path)


_ODD_SETTING = (TypeError, ValueError, AttributeError, KeyError)  # a hand-edited file: a list for a dict, ...


def _odd_settings(folder: Path, exc: Exception) -> UsageError:
    return UsageError(f"tokenizer {folder}: a setting in its tokenizer_config.json, special_tokens_map.json or "
                      f"added_tokens.json is not of the form transformers writes ({type(exc).__name__}: {exc}); "
                      "fix or remove it")


def _read_tokenizer_json(path: Path) -> dict[str, Any]:
    """A tokenizer.json, refused unless its model is BERT's WordPiece."""
    refuse_empty(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read tokenizer {path}: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict) or "model" not in data:  # another JSON file (config.json): tokenizers' words
        raise UsageError(f"{path} is not a tokenizer.json (no \"model\" in it); give a tokenizer folder, its "
                         "tokenizer.json or its vocab.txt")  # would blame its syntax
    try:
        Tokenizer.from_str(json.dumps(data))  # the same file must load in tokenizers
    except Exception as exc:  # tokenizers raises a bare Exception for malformed files
        raise UsageError(f"cannot read tokenizer {path}: {str(exc).splitlines()[0]}") from None
    model = data.get("model") or {}
    if model.get("type") != "WordPiece" or model.get("continuing_subword_prefix", CONTINUATION) != CONTINUATION:
        raise UsageError(f"{path} is not a BERT WordPiece tokenizer (with '##' continuations)")
    return data
