"""Whether a corpus fits a model and a tokenizer: the same token ids for the same text, sentence pairs only for
a model with two segments, sequences no longer than its positions. Pre-training and `evaluate mlm` refuse a
corpus that does not, in one line naming what differs, before any step runs on ids the model never learned.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertctl.config import BertConfig
from bertctl.errors import UsageError
from bertctl.tokenizer import BertTokenizer, never_split_in_effect
from bertctl.tokenizer_folder import load_tokenizer


def corpus_tokenizer(corpus: Path | str, manifest: dict[str, Any], candidates: list[tuple[str, Path, bool]],
                     fix: str) -> BertTokenizer:
    """The first of `candidates` ((name in messages, folder, whether its files say its settings)), each refused
    unless it encodes text as the corpus's own tokenizer did: the vocabulary's sha256 in the manifest, then the
    id settings of the corpus's own copy (CORPUS/tokenizer) where the corpus has one. `fix` ends the message of
    another vocabulary."""
    own_folder = Path(corpus) / "tokenizer"
    loaded = [(name, path, load_tokenizer(path), settled) for name, path, settled in candidates]
    own = next((tokenizer for _, path, tokenizer, _ in loaded if path == own_folder), None)
    for name, _, tokenizer, settled in loaded:
        if tokenizer.sha256() != manifest["tokenizer_sha256"]:
            raise UsageError(f"{name} is not the one corpus {corpus} was built with (sha256 "
                             f"{tokenizer.sha256()[:12]} vs {manifest['tokenizer_sha256'][:12]}); {fix}")
        if own is not None and settled:
            _refuse_other_encoding(name, tokenizer, own, own_folder)
    return loaded[0][2]


def says_its_settings(folder: Path) -> bool:
    """Whether a tokenizer folder's files say its casing and other settings (a bare vocab.txt does not)."""
    return (folder / "tokenizer_config.json").is_file() or (folder / "tokenizer.json").is_file()


def _refuse_other_encoding(name: str, candidate: BertTokenizer, own: BertTokenizer, own_folder: Path) -> None:
    """Same vocabulary but other ids for some text would make the saved model encode text otherwise than its
    training data; one line names the first such setting, so the user knows which file to fix."""
    given, corpus_own = _id_settings(candidate), _id_settings(own)
    for setting in dict.fromkeys([*given, *corpus_own]):
        a, b = given.get(setting), corpus_own.get(setting)
        if a == b:
            continue
        if setting in ("special tokens", "added tokens"):  # the first entry that differs, not the whole list
            a, b = next(((x, y) for x, y in zip([*a, None], [*b, None], strict=False) if x != y), (a, b))
        shown = str if setting == "added tokens" else _shown
        fix = ("leave out --tokenizer (the corpus's own is the default)" if name.startswith("--tokenizer") else
               "build a corpus with the model's tokenizer (corpus build --tokenizer MODEL)")
        raise UsageError(f"{name} encodes text otherwise than {own_folder}, which built the corpus: {setting} "
                         f"{shown(a)} vs {shown(b)}; {fix}")


def _id_settings(tokenizer: BertTokenizer) -> dict[str, Any]:
    """The tokenizer settings besides the vocabulary that change the ids of a text (not decoding's, nor
    model_max_length), under tokenizer_config.json's names. Without basic tokenization none of casing,
    accents, CJK splitting or never_split is applied (transformers' rule), so they do not count then."""
    o = tokenizer.options
    settings: dict[str, Any] = {"do_basic_tokenize": o.basic}
    if o.basic:
        settings.update({"do_lower_case": o.lowercase,
                         "strip_accents": o.lowercase if o.strip_accents is None else o.strip_accents,
                         "tokenize_chinese_chars": o.chinese_chars,
                         "never_split": never_split_in_effect(tokenizer.backend, o),
                         "additional_special_tokens": sorted(o.extras)})
    settings["special tokens"] = list(o.specials)
    settings["added tokens"] = [f"{t.content!r} (id {t.id}, special {t.special}, single_word {t.single_word}, "
                                f"normalized {t.normalized})" for t in tokenizer.added_tokens()]  # how each matches
    return settings


def _shown(value: Any) -> str:
    """A setting's value cut to one readable line (never_split lists can be long)."""
    text = repr(value)
    return text if len(text) <= 100 else text[:97] + "..."


def refuse_unfit_corpus(config: BertConfig, manifest: dict[str, Any], corpus: Path | str,
                        model: str = "the model") -> None:
    """A corpus of sentence pairs needs two segment embeddings, and its sequences must fit the model's positions:
    else a forward pass fails deep in torch (an index past an embedding)."""
    if manifest["objective"] != "mlm":
        config.refuse_pairs(model, f"corpus {corpus} holds sentence pairs ({manifest['objective']})",
                            "a corpus built with --objective mlm")
    if manifest["max_seq_length"] > config.max_position_embeddings:
        raise UsageError(f"corpus {corpus} has sequences of {manifest['max_seq_length']} tokens but {model} "
                         f"takes at most {config.max_position_embeddings}; build a corpus with --max-seq-length "
                         f"{config.max_position_embeddings} or less")
