"""The tokenizer API: loading every folder flavour, saving for transformers, and ids identical to the
reference (transformers' pure-Python BertTokenizer, Google's tokenization) on hard strings."""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import shutil
from pathlib import Path

import pytest

from bertctl.config import TokenizerTrainConfig
from bertctl.errors import UsageError
from bertctl.tokenizer import SPECIAL_TOKENS, Added, BertTokenizer, TokenizerOptions, encode_rows
from bertctl.tokenizer_folder import has_tokenizer, load_tokenizer
from bertctl.tokenizer_train import train_tokenizer

AUSTEN = Path(__file__).resolve().parents[1] / "bertctl" / "resources" / "austen.txt.gz"

HARD = [
    "", "   ", "\t\n\r", "Hello, World!", "HeLLo WoRLD lOuD", "naïve café résumé Ångström Øre",
    "e\u0301te\u0301 a\u0300\u0301\u0302 combining", "ΟΔΟΣ ΟΔΌΣ. Σ σ ς ΣΑΣ Σίσυφος ΣΊΣΥΦΟΣ' ΑΣ.",
    "İstanbul ǅemal ǈ ß ẞ ﬁne Ⅻ ① ² Ⓐ ᾼ", "日本語のテキスト 中文字符测试 한국어 텍스트",
    "\U00020000\U0002a700\U0002b820 ext \U00030000 a\U00031350b",  # plane 3: CJK ext G, unassigned
    "\uf900\ufa0a\U0002f800 compatibility ideographs a\ufa0eb", "hello...!!!???--- ...", "(a)[b]{c}<d> «e» „f“ ¿g? ¡h!",
    "don't stop--now; it's 5 o'clock.", "\x00\x01\x7f control\x85chars\x0bvt\x0cff\x1cfs",
    "zero\u200bwidth\u200cjoin\u200dner\ufeffbom\u2060wj\u00adshy", "emoji 😀👍🏽 🥰 👨‍👩‍👧 🫨 🩷 end",
    "\ufffd replacement \uffff nonchar \ue000 private \U000f0000", "a" * 101, "b" * 100, "x" * 150 + " short",
    "Ａｂｃ fullwidth ＡＢＣ", "مرحبا بالعالم עברית", "multiple   spaces\u00a0nbsp\u3000ideo\u2009thin",
    "line\u2028sep\u2029para\u0378unassigned\U0001fae8new", "[MASK] is [mask] [CLS]x [SEP][PAD] [UNK]",
    "unicode ™ © ® § ¶ † ‡ • … ‰ ′ ″", "1,234.56 $100 50% #hash @at ^caret `tick` ~tilde |pipe \\back",
    "http://example.com/a?b=c&d=e#frag", "tab\tsep\ttabs\rcr\r\nlf", "\U0001d400\U0001d41a math bold", "ॐ नमस्ते दुनिया",
    "ไทย ภาษา", "Ελληνικά ΚΕΦΑΛΑΙΑ", "Привет МИР ёЁ", "a\u0331\u0332\u0333 b\u0489",
    "Α..Σ Α''Σ ʰΣ ΑΣʰ ΑΣ\u0345 A\U0001171eΣ ΣΑ\u00adΣ",  # final sigma past any case-ignorable run
]
PAIRS = [("Who wrote Emma?", "Jane Austen wrote ÉMMA in 1815."), ("ΟΔΟΣ", ""), ("", "only pair 日本")]


def reference(vocab: Path, lowercase: bool):
    """transformers' pure-Python BertTokenizer (named BertTokenizerLegacy since transformers 5)."""
    transformers = pytest.importorskip("transformers")
    try:
        from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy as Reference
    except ImportError:
        Reference = transformers.BertTokenizer
    transformers.logging.set_verbosity_error()
    return Reference(str(vocab), do_lower_case=lowercase)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Path]:
    """An uncased and a cased vocabulary trained on part of the novels plus the hard strings."""
    folder = tmp_path_factory.mktemp("trained")
    with gzip.open(AUSTEN, "rt", encoding="utf-8") as handle:
        text = handle.read(400_000)
    (folder / "corpus.txt").write_text(text + "\n".join(HARD * 3), encoding="utf-8")
    out = {}
    for lowercase in (True, False):
        out[lowercase] = folder / f"tok-{lowercase}"
        train_tokenizer(TokenizerTrainConfig(inputs=(str(folder / "corpus.txt"),), out=out[lowercase],
                                             vocab_size=3000, lowercase=lowercase))
    return out


def mismatches(ours: BertTokenizer, ref, texts: list[str]) -> list[str]:
    bad = [t for t in texts if ours.encode(t).ids != ref(t)["input_ids"]]
    batch = ours.encode_batch([a for a, _ in PAIRS], [b for _, b in PAIRS])
    for (a, b), batched in zip(PAIRS, batch, strict=True):
        single, row = ours.encode(a, b), encode_rows(ours, [a], b)[0]  # row: what `tokenizer encode --pair` prints
        got = [(single.ids, single.type_ids), (batched.ids, batched.type_ids),
               (row["input_ids"], row["token_type_ids"])]
        expected = ref(a, b, return_token_type_ids=True)
        if any(ids != (expected["input_ids"], expected["token_type_ids"]) for ids in got):
            bad.append(f"{a} | {b}")
    return bad


# The ends of _is_chinese_char's ranges, and the code points just outside them.
CJK_EDGES = [code for lo, hi in [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2CEAF),
                                  (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)] for code in (lo - 1, lo, hi, hi + 1)]


def sweep() -> list[str]:
    """Every 41st code point of planes 0-2 and some of 14, and CJK_EDGES, inside and between words."""
    codes = [c for c in (*range(0, 0x30000, 41), *range(0xE0000, 0xE0200, 7), *CJK_EDGES) if not 0xD800 <= c < 0xE000]
    return [f"a{chr(c)}b {chr(c)}X{chr(c)}" for c in codes]


@pytest.mark.parametrize("lowercase", [True, False], ids=["uncased", "cased"])
def test_trained_vocab_ids_match_reference(trained: dict[bool, Path], lowercase: bool) -> None:
    ours = load_tokenizer(trained[lowercase])
    assert ours.lowercase is lowercase
    assert mismatches(ours, reference(trained[lowercase] / "vocab.txt", lowercase), HARD + sweep()) == []


def test_bert_base_uncased_ids_match_reference(minilm: Path, tmp_path: Path) -> None:
    shutil.copy(minilm / "vocab.txt", tmp_path / "vocab.txt")  # a bare vocab.txt: uncased by default
    ours = load_tokenizer(tmp_path / "vocab.txt")
    assert (ours.vocab_size, ours.pad_id, ours.unk_id, ours.cls_id, ours.sep_id, ours.mask_id) == (
        30522, 0, 100, 101, 102, 103)
    assert mismatches(ours, reference(tmp_path / "vocab.txt", True), HARD + sweep()) == []
    assert ours.sha256() == hashlib.sha256((minilm / "vocab.txt").read_bytes()).hexdigest()


def test_vocab_with_windows_line_ends_reads_as_transformers_reads_it(minilm: Path, tmp_path: Path) -> None:
    """A vocab.txt saved with CRLF: the "\\r" is no part of the token (Google's strip(), transformers' both)."""
    tokens = (minilm / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    (tmp_path / "vocab.txt").write_bytes("".join(f"{t}\r\n" for t in tokens).encode("utf-8"))
    ours = load_tokenizer(tmp_path / "vocab.txt")
    assert (ours.vocab_size, ours.unk_id, ours.mask_id, ours.token_to_id("dog")) == (30522, 100, 103, 3899)
    assert mismatches(ours, reference(tmp_path / "vocab.txt", True), HARD) == []
    assert ours.sha256() == hashlib.sha256((minilm / "vocab.txt").read_bytes()).hexdigest()  # the same vocabulary


@pytest.mark.parametrize(("lowercase", "strip_accents"), [(True, None), (False, None), (False, True)])
def test_decomposition_missing_from_tokenizers_tables_is_pythons(tmp_path: Path, lowercase: bool,
                                                                 strip_accents: bool | None) -> None:
    """U+11938 = U+11935 U+11930 (Unicode 13): tokenizers' NFC did not compose it nor its NFD decompose it."""
    o, a, b = "\U00011938", "\U00011935", "\U00011930"
    tokens = [*SPECIAL_TOKENS, "x", "##x", a, b, o, f"##{a}", f"##{b}", f"##{o}", a + b, f"##{a}{b}"]
    (tmp_path / "vocab.txt").write_text("".join(f"{t}\n" for t in tokens), encoding="utf-8")
    ref = reference(tmp_path / "vocab.txt", lowercase)
    ref.basic_tokenizer.strip_accents = strip_accents
    ours = BertTokenizer.from_vocab(tokens, lowercase, strip_accents)
    texts = [o, a + b, f"x{o}x", f"x{a}{b}", f"{a}\u0301{b}", f"{o}\u0301", f"{a}\u200b{b}", f"{b}{a}", o + o]
    assert [ours.encode(t).ids for t in texts] == [ref(t)["input_ids"] for t in texts]


def test_the_shipped_unicode_tables_are_this_pythons() -> None:
    """resources/unicode_tables.json spares every start ~0.3 s of CPU: for its Unicode version it must hold what
    unicodedata and str.lower() give (regenerate: python -m bertctl.unicode_tables); another version's Python
    computes its own."""
    from bertctl import unicode_tables

    shipped = json.loads(unicode_tables.TABLES.read_text(encoding="utf-8"))
    computed = unicode_tables.computed_tables()
    assert shipped == computed or shipped["unidata_version"] != computed["unidata_version"]
    assert unicode_tables.category_class("Cn") == computed["Cn"]
    assert unicode_tables.category_class("Mn") == computed["Mn"]
    assert unicode_tables.casing_classes() == (computed["cased"], computed["case_ignorable"])


def test_offsets_leave_out_what_the_clean_up_drops_or_composes() -> None:
    """docs/tokenizer.md's offsets: a character dropped at a word's end, or an accent NFC composes into the letter
    before it (accents kept), is outside the span."""
    tokens = [*SPECIAL_TOKENS, "e", "\u00e9", "ab", "x"]
    cased, uncased = BertTokenizer.from_vocab(tokens, lowercase=False), BertTokenizer.from_vocab(tokens)
    text = "e\u0301 ab\u200b x"
    assert (cased.encode(text).tokens, cased.encode(text).offsets) == (
        ["[CLS]", "\u00e9", "ab", "x", "[SEP]"], [(0, 0), (0, 1), (3, 5), (7, 8), (0, 0)])
    assert (uncased.encode(text).tokens, uncased.encode(text).offsets) == (
        ["[CLS]", "e", "ab", "x", "[SEP]"], [(0, 0), (0, 1), (3, 5), (7, 8), (0, 0)])


@pytest.mark.parametrize("lowercase", [True, False], ids=["uncased", "cased"])
def test_plain_text_pipeline_reads_special_tokens_in_text_as_googles_tokenizer(tmp_path: Path,
                                                                              lowercase: bool) -> None:
    """Corpus building's pipeline: special tokens in the text are text, as in Google's FullTokenizer (the
    reference's BasicTokenizer without never_split, then WordPiece), also when lowercasing leaves them as they
    are ("<mask>", "<ENT>"), which the pure-Python tokenizer keeps whole."""
    tokens = [*SPECIAL_TOKENS[:4], "<mask>", "<ent>", "a>", "<", ">", "[", "]", "mask", "ent", "a", "x", "##x",
              "MASK", "ENT", "A", "##mask", "##>"]
    (tmp_path / "vocab.txt").write_text("".join(f"{t}\n" for t in tokens), encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "do_lower_case": lowercase, "mask_token": "<mask>", "additional_special_tokens": ["<ent>", "a>"]}))
    ref = reference(tmp_path / "vocab.txt", lowercase)
    backend = load_tokenizer(tmp_path).plain_text_backend()
    texts = ["<mask>", "x<mask>x", "<ENT> <ent>", "[MASK] [SEP]", "A> a>", "\u01fa\u226f", "<MASK>x"]
    google = [ref.convert_tokens_to_ids([piece for word in ref.basic_tokenizer.tokenize(text, never_split=None)
                                         for piece in ref.wordpiece_tokenizer.tokenize(word)]) for text in texts]
    assert [e.ids for e in backend.encode_batch(texts, add_special_tokens=False)] == google


def test_foreign_tokenizer_json_gets_the_exact_pipeline(minilm: Path) -> None:
    """MiniLM's tokenizer.json pads to 128 and lowercases sigma char by char; loading fixes both."""
    ours = load_tokenizer(minilm)
    assert ours.encode("ΟΔΟΣ").ids == reference(minilm / "vocab.txt", True)("ΟΔΟΣ")["input_ids"]
    assert len(ours.encode("short").ids) == 3


def test_save_writes_what_transformers_loads(trained: dict[bool, Path], tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    ours = load_tokenizer(trained[False])
    ours.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["special_tokens_map.json", "tokenizer.json",
                                                          "tokenizer_config.json", "vocab.txt"]
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "BertTokenizer" and config["do_lower_case"] is False
    vocab = (tmp_path / "vocab.txt").read_text(encoding="utf-8").split("\n")
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and vocab[-1] == ""
    assert ours.sha256() == hashlib.sha256((tmp_path / "vocab.txt").read_bytes()).hexdigest()
    text, pair = "Mr. Darcy's estate, Pemberley!", "Elizabeth Bennet"
    expected = ours.encode(text, pair)
    for loaded in (transformers.BertTokenizer(str(tmp_path / "vocab.txt"), do_lower_case=False),
                   transformers.BertTokenizerFast.from_pretrained(str(tmp_path))):
        got = loaded(text, pair)
        assert (got["input_ids"], got["token_type_ids"]) == (expected.ids, expected.type_ids)
    again = load_tokenizer(tmp_path)
    assert again.sha256() == ours.sha256() and again.lowercase is False
    assert [e.ids for e in again.encode_batch(HARD)] == [e.ids for e in ours.encode_batch(HARD)]


def test_bare_vocab_casing_comes_from_config_then_flag(trained: dict[bool, Path], tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    shutil.copy(trained[False] / "vocab.txt", tmp_path / "vocab.txt")
    assert has_tokenizer(tmp_path) and not has_tokenizer(tmp_path / "nothing")
    with caplog.at_level(logging.WARNING):
        assert load_tokenizer(tmp_path, lowercase=False).lowercase is False
        assert caplog.text == ""
        assert load_tokenizer(tmp_path).lowercase is True  # Google's default: uncased
    assert "capitals but the tokenizer lowercases" in caplog.text and "--cased" in caplog.text
    shutil.copy(trained[False] / "tokenizer_config.json", tmp_path)
    assert load_tokenizer(tmp_path).lowercase is False
    caplog.clear()
    shutil.copy(trained[True] / "vocab.txt", tmp_path / "vocab.txt")
    with caplog.at_level(logging.WARNING):
        assert load_tokenizer(tmp_path / "vocab.txt").lowercase is False
    assert "no token with a capital" in caplog.text and "--lowercase" in caplog.text


def test_a_run_folder_given_as_tokenizer_names_its_model_folders(tmp_path: Path) -> None:
    """`--tokenizer runs/quickstart` said only that the folder has no tokenizer files; the model flags say where
    a run folder's models (each with its tokenizer) are, and so does this one now."""
    run = tmp_path / "run"
    (run / "final").mkdir(parents=True)
    (run / "run.json").write_text("{}")
    (run / "final" / "config.json").write_text("{}")
    with pytest.raises(UsageError, match=f"no tokenizer.json or vocab.txt; it is a run folder: give {run / 'final'}$"):
        load_tokenizer(run)


def test_a_run_folder_without_a_checkpoint_says_it_has_none_yet(tmp_path: Path) -> None:
    """`fill --model RUN` while RUN trains towards its first save: "give a folder written by bertctl" sent the user
    to look for another folder, where the run's model is only not written yet."""
    from bertctl.checkpoint import read_checkpoint

    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text('{"config": {}, "corpus_manifest": {}}')  # pretrain's records its corpus
    for load in (load_tokenizer, read_checkpoint):
        with pytest.raises(UsageError, match="it is a run folder with no checkpoint yet: it saves step-N/ every "
                                             "--save-every steps and final/ at the end"):
            load(run)


def test_a_quick_start_run_folder_given_as_tokenizer_names_the_tokenizer_it_trained(tmp_path: Path) -> None:
    """`--tokenizer RUN` on a quick start that has not saved yet said only that it has no checkpoint, where the
    tokenizer it trained is in RUN/data/tokenizer from the start (and is final/'s tokenizer once it saves)."""
    run = tmp_path / "run"
    (run / "data" / "tokenizer").mkdir(parents=True)
    (run / "run.json").write_text('{"config": {}, "corpus_manifest": {}, "quickstart": true}')
    (run / "data" / "tokenizer" / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n", encoding="utf-8")
    with pytest.raises(UsageError, match=f"no tokenizer.json or vocab.txt; give the tokenizer in it, "
                                         f"{run / 'data' / 'tokenizer'} \\(where a quick-start run keeps the one it "
                                         f"trained\\)$"):
        load_tokenizer(run)


def test_a_folder_with_a_data_tokenizer_is_not_called_a_quick_start_run(tmp_path: Path) -> None:
    """Any folder may keep a tokenizer in data/tokenizer (a project's): the hint names it without saying the folder
    is a quick-start run's."""
    folder = tmp_path / "project"
    (folder / "data" / "tokenizer").mkdir(parents=True)
    (folder / "data" / "tokenizer" / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n", encoding="utf-8")
    with pytest.raises(UsageError) as raised:
        load_tokenizer(folder)
    assert "it is a quick-start run folder" not in str(raised.value)
    assert str(raised.value).endswith(f"give the tokenizer in it, {folder / 'data' / 'tokenizer'} (where a "
                                      "quick-start run keeps the one it trained)")


def test_a_data_tokenizer_folder_with_no_tokenizer_in_it_is_not_named(tmp_path: Path) -> None:
    """Only a data/tokenizer that holds a tokenizer is worth giving instead: an empty one is not named."""
    folder = tmp_path / "project"
    (folder / "data" / "tokenizer").mkdir(parents=True)
    with pytest.raises(UsageError, match="no tokenizer.json or vocab.txt; give a tokenizer folder or a vocab.txt$"):
        load_tokenizer(folder)


def test_a_finetune_work_folder_is_not_called_a_run_folder_without_a_checkpoint(tmp_path: Path) -> None:
    """A fine-tuning run works in .OUT.work (run.json, seed-N/ with its run.json, step-N/ or done/ once the seed is
    finished) and saves no final/: pretrain's "no checkpoint yet" was false there."""
    from bertctl.checkpoint import read_checkpoint

    work = tmp_path / ".out.work"
    (work / "seed-1" / "done").mkdir(parents=True)
    (work / "run.json").write_text('{"config": {}, "cwd": "."}')
    (work / "seed-1" / "run.json").write_text('{"config": {}, "seed": 1}')
    for folder in (work, work / "seed-1"):
        for load in (load_tokenizer, read_checkpoint):
            with pytest.raises(UsageError) as refusal:
                load(folder)
            assert "no checkpoint yet" not in str(refusal.value), str(refusal.value)


def test_a_best_seed_whose_model_is_not_there_is_not_pointed_to(tmp_path: Path) -> None:
    """results.json names the best seed before its folder is complete (or after it was removed): the hint
    then offers the seed folders that hold a model, and evaluate reads the run folder as given."""
    from bertctl.run_folder import best_seed_folder, run_folder_hint

    for seed in ("seed-1", "seed-2"):
        (tmp_path / seed).mkdir()
    (tmp_path / "seed-1" / "config.json").write_text("{}")
    (tmp_path / "results.json").write_text(json.dumps({"best_model": "seed-2"}))
    assert best_seed_folder(tmp_path) is None
    assert run_folder_hint(tmp_path) == f"it holds one model per seed: give one, e.g. {tmp_path / 'seed-1'}"


@pytest.mark.parametrize("record", ['{"config": {}, "corpus_', "[1]"])
def test_a_damaged_run_json_gives_no_run_folder_hint_and_no_error_of_its_own(tmp_path: Path, record: str) -> None:
    """The hint is a guess from run.json: a truncated or non-object one leaves the folder's own refusal alone."""
    from bertctl.checkpoint import read_checkpoint

    (tmp_path / "run.json").write_text(record)
    with pytest.raises(UsageError, match="has no tokenizer.json or vocab.txt; give a tokenizer folder or a vocab.txt$"):
        load_tokenizer(tmp_path)
    with pytest.raises(UsageError, match=r"no config.json \(give a folder written by bertctl or transformers'"):
        read_checkpoint(tmp_path)


def test_a_corpus_folder_given_as_tokenizer_names_its_tokenizer(tmp_path: Path) -> None:
    """`corpus build TEXT -t CORPUS` or `pretrain --tokenizer CORPUS` said only that the folder has no tokenizer
    files; a corpus keeps a copy of its tokenizer in CORPUS/tokenizer, which the line now names."""
    corpus = tmp_path / "corpus"
    (corpus / "tokenizer").mkdir(parents=True)
    (corpus / "manifest.json").write_text("{}")
    (corpus / "tokenizer" / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n", encoding="utf-8")
    with pytest.raises(UsageError, match=f"no tokenizer.json or vocab.txt; it is a corpus folder: give its tokenizer "
                                         f"{corpus / 'tokenizer'}$"):
        load_tokenizer(corpus)


def test_bad_tokenizer_paths_and_vocabularies_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"tokenizer .*nowhere does not exist"):
        load_tokenizer(tmp_path / "nowhere")
    with pytest.raises(UsageError, match="has no tokenizer.json or vocab.txt"):
        load_tokenizer(tmp_path)
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\na\n", encoding="utf-8")
    with pytest.raises(UsageError, match=r"read as a vocab.txt \(one token a line\): line 7 repeats token 'a'"):
        load_tokenizer(tmp_path)
    (tmp_path / "vocab.txt").write_text("[PAD]\n[CLS]\n[SEP]\n[MASK]\na\n", encoding="utf-8")
    with pytest.raises(UsageError, match=r"no \[UNK\] token"):
        load_tokenizer(tmp_path)
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\na\n", encoding="utf-8")
    assert load_tokenizer(tmp_path).mask_id == 5  # appended after the vocabulary, as transformers does
    (tmp_path / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(UsageError, match="cannot read tokenizer .*tokenizer.json"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_bytes(b"")  # cut short: not "Expecting value: line 1 column 1"
    with pytest.raises(UsageError, match=r"tokenizer.json is empty \(0 bytes: a download or copy cut short\?\)"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").unlink()
    (tmp_path / "tokenizer_config.json").write_bytes(b"")
    with pytest.raises(UsageError, match=r"tokenizer_config.json is empty \(0 bytes"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer_config.json").unlink()
    (tmp_path / "config.json").write_text('{"model_type": "bert", "hidden_size": 8}', encoding="utf-8")
    with pytest.raises(UsageError, match=r"config.json is not a tokenizer.json \(no \"model\" in it\); give a "):
        load_tokenizer(tmp_path / "config.json")  # a model's config.json, not "cannot read ...: expected `,`"


def test_the_default_options_decode_as_transformers_bert_tokenizer(trained: dict[bool, Path]) -> None:
    """Options a Python caller builds leave the decoder as transformers 5's BertTokenizer has it: WordPiece's,
    joining `##` pieces, and skip_special_tokens leaving out every token flagged special, not only the named."""
    vocab = load_tokenizer(trained[True]).vocab()
    built = BertTokenizer.from_vocab(vocab)
    assert len(built.encode("a" * 100).ids) > 3 and built.decode(built.encode("a" * 100).ids) == "a" * 100
    flagged = BertTokenizer.from_vocab(vocab, options=TokenizerOptions(added=(Added("<x>", len(vocab), True),)))
    ids = flagged.encode("pride <x>").ids
    assert ids[-2] == len(vocab) and flagged.decode(ids) == "pride"


def test_words_over_100_characters_are_unknown_and_batches_check_pairs(trained: dict[bool, Path]) -> None:
    ours = load_tokenizer(trained[True])
    assert ours.encode("a" * 101, add_special_tokens=False).ids == [ours.unk_id]
    assert ours.unk_id not in ours.encode("a" * 100, add_special_tokens=False).ids
    assert ours.encode("[MASK]").ids == [ours.cls_id, ours.mask_id, ours.sep_id]
    assert ours.decode(ours.encode("pride and prejudice").ids) == "pride and prejudice"
    with pytest.raises(UsageError, match="2 texts but 1 pairs"):
        ours.encode_batch(["a", "b"], ["c"])
