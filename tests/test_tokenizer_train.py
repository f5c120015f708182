"""`bertctl tokenizer train` and `encode` through the CLI: exact size, same bytes twice, refusals."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bertctl.cli import app

AUSTEN = Path(__file__).resolve().parents[1] / "bertctl" / "resources" / "austen.txt.gz"
FILES = ["provenance.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt"]


def run(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 200 kB of the novels, split over a plain and a gzipped file in a folder."""
    folder = tmp_path_factory.mktemp("corpus")
    with gzip.open(AUSTEN, "rt", encoding="utf-8") as handle:
        text = handle.read(200_000)
    (folder / "texts").mkdir()
    (folder / "texts" / "part1.txt").write_text(text[:100_000], encoding="utf-8")
    (folder / "texts" / "part2.txt.gz").write_bytes(gzip.compress(text[100_000:].encode("utf-8")))
    return folder


def vocab_lines(folder: Path) -> list[str]:
    return (folder / "vocab.txt").read_text(encoding="utf-8").splitlines()


def test_train_writes_exact_size_and_same_bytes_twice(corpus: Path, tmp_path: Path) -> None:
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        result = run("tokenizer", "train", corpus / "texts", "--out", out, "--vocab-size", "1500",
                     "--limit-alphabet", "40")
        assert result.exit_code == 0, result.output
        assert "1500 entries (40 characters" in result.output
    assert sorted(p.name for p in outs[0].iterdir()) == FILES
    tokens = vocab_lines(outs[0])
    assert len(tokens) == len(set(tokens)) == 1500
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert tokens[5:45] == sorted(tokens[5:45]) and all(len(t) == 1 for t in tokens[5:45])
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    record = json.loads((outs[0] / "provenance.json").read_text())
    assert record["vocab_size"] == 1500 and record["unused"] == 0
    assert record["config"]["limit_alphabet"] == 40 and len(record["inputs"]) == 2
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_small_corpus_is_padded_with_unused_tokens(tmp_path: Path) -> None:
    (tmp_path / "tiny.txt").write_text("the cat sat on the mat\nthe dog sat\n" * 3, encoding="utf-8")
    result = run("tokenizer", "train", tmp_path / "tiny.txt", "--out", tmp_path / "tok", "--vocab-size", "200")
    assert result.exit_code == 0, result.output
    tokens = vocab_lines(tmp_path / "tok")
    first = tokens.index("[unused0]")
    assert len(tokens) == 200 and tokens[first:] == [f"[unused{i}]" for i in range(200 - first)]
    assert "the" in tokens[:first] and "##at" in tokens[:first]
    record = json.loads((tmp_path / "tok" / "provenance.json").read_text())
    assert record["unused"] == 200 - first


def test_tables_train_through_their_text_column(tmp_path: Path) -> None:
    rows = [{"id": i, "body": f"Row number {i} speaks of Pemberley and Netherfield."} for i in range(50)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "rows.csv").write_text("id,body\n" + "".join(f'{r["id"]},"{r["body"]}"\n' for r in rows),
                                       encoding="utf-8")
    result = run("tokenizer", "train", tmp_path / "rows.jsonl", tmp_path / "rows.csv", "--text-column", "body",
                 "--out", tmp_path / "tok", "--vocab-size", "120", "--cased")
    assert result.exit_code == 0, result.output
    assert "Pemberley" in vocab_lines(tmp_path / "tok")
    result = run("tokenizer", "train", tmp_path / "rows.jsonl", "--out", tmp_path / "tok2", "--vocab-size", "120")
    assert result.exit_code == 2 and "no column 'text'" in result.output
    assert not (tmp_path / "tok2").exists()


@pytest.mark.parametrize("case", ["no match", "empty", "binary", "too small", "exists"])
def test_bad_input_fails_with_one_line_and_leaves_nothing(case: str, corpus: Path, tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_text("\n \n", encoding="utf-8")
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "exists").mkdir()
    (tmp_path / "exists" / "keep.txt").write_text("mine", encoding="utf-8")
    inputs, out, size, message = {
        "no match": (tmp_path / "nothing*.txt", "tok", 100, "nothing matched"),
        "empty": (tmp_path / "empty.txt", "tok", 100, "hold no text"),
        "binary": (tmp_path / "blob.bin", "tok", 100, "none of the 1 input(s) is UTF-8 text"),
        "too small": (corpus / "texts", "tok", 50, "--vocab-size 50 is smaller than the 5 special tokens"),
        "exists": (corpus / "texts", "exists", 100, "already exists; pass --overwrite"),
    }[case]
    before = sorted(p.name for p in tmp_path.iterdir())
    result = run("tokenizer", "train", inputs, "--out", tmp_path / out, "--vocab-size", size)
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.startswith("bertctl: error")]
    assert len(lines) == 1 and message in lines[0], result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (tmp_path / "exists" / "keep.txt").read_text() == "mine"


def test_overwrite_replaces_and_skips_undecodable_files(corpus: Path, tmp_path: Path) -> None:
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "stale.txt").write_text("old", encoding="utf-8")
    (tmp_path / "latin1.txt").write_bytes("café au lait\n".encode("latin-1"))
    result = run("tokenizer", "train", corpus / "texts", tmp_path / "latin1.txt", "--out", tmp_path / "tok",
                 "--vocab-size", "300", "--overwrite")
    assert result.exit_code == 0, result.output
    assert "skipped 1 unreadable input(s)" in result.output
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == FILES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latin1.txt", "tok"]
    record = json.loads((tmp_path / "tok" / "provenance.json").read_text())
    assert record["skipped"] == [{"source": str(tmp_path / "latin1.txt"), "reason": "not UTF-8 (byte 3)"}]


def test_encode_prints_tokens_ids_and_segments(corpus: Path, tmp_path: Path) -> None:
    assert run("tokenizer", "train", corpus / "texts", "--out", tmp_path / "tok", "--vocab-size", "400").exit_code == 0
    result = run("tokenizer", "encode", "--tokenizer", tmp_path / "tok", "Mr. Darcy smiled", "Élan",
                 "--pair", "Emma", "--json")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [r["text"] for r in rows] == ["Mr. Darcy smiled", "Élan"]
    first = rows[0]
    assert first["tokens"][0] == "[CLS]" and first["tokens"][-1] == "[SEP]" and first["tokens"][1] == "mr"
    assert first["input_ids"][0] == 2 and first["input_ids"].count(3) == 2
    split = first["tokens"].index("[SEP]") + 1
    assert first["token_type_ids"] == [0] * split + [1] * (len(first["tokens"]) - split)
    plain = run("tokenizer", "encode", "-t", tmp_path / "tok" / "vocab.txt", "Mr. Darcy")
    assert plain.exit_code == 0 and "[CLS]" in plain.output and "segments" in plain.output
    missing = run("tokenizer", "encode", "-t", tmp_path / "nowhere", "x")
    assert missing.exit_code == 2 and "nowhere does not exist" in missing.output


def test_words_that_encode_as_unk_teach_no_pieces(tmp_path: Path) -> None:
    """A word with a character left out of the alphabet, or longer than 100 characters, encodes as [UNK]; the
    trainer must not learn from it ("aqb" would otherwise teach "ab", text that never occurs)."""
    (tmp_path / "gap.txt").write_text(("aaaa bbbb " * 10 + "aqb " * 100 + "\n") * 2)
    (tmp_path / "long.txt").write_text(("hello world " * 5 + "qwertyuiop" * 10 + "q \n") * 50)  # 101 characters
    for name, size, limit in (("gap", "20", "2"), ("long", "200", "1000")):
        result = CliRunner().invoke(app, ["tokenizer", "train", str(tmp_path / f"{name}.txt"), "--out",
                                          str(tmp_path / name), "--vocab-size", size, "--limit-alphabet", limit])
        assert result.exit_code == 0, result.output
    gap = (tmp_path / "gap" / "vocab.txt").read_text().split()
    assert gap[5:7] == ["a", "b"] and "aaaa" in gap and not [t for t in gap if "ab" in t]
    learned = (tmp_path / "long" / "vocab.txt").read_text().split()
    pieces = [t.removeprefix("##") for t in learned if not t.startswith("[") and len(t.removeprefix("##")) > 1]
    assert "hello" in pieces and all(piece in ("hello", "world") or piece in "hello world" for piece in pieces)


def test_a_very_long_line_trains_in_pieces_with_its_words_whole(tmp_path: Path) -> None:
    """A one-line file reaches the trainer cut at spaces (its memory grows with a text): same vocabulary as
    the same words on many lines."""
    from bertctl.tokenizer_train import LINE_CHARS, _cut_at_spaces

    words = [("abcde"[i % 5] + "fghij"[i % 7 % 5] + "klm"[i % 3]) * (1 + i % 3) for i in range(60_000)]
    (tmp_path / "one.txt").write_text(" ".join(words) + "\n")
    (tmp_path / "many.txt").write_text("\n".join(" ".join(words[i:i + 50]) for i in range(0, len(words), 50)))
    pieces = list(_cut_at_spaces(" ".join(words)))
    assert len(pieces) > 3 and max(map(len, pieces)) <= LINE_CHARS and " ".join(pieces).split() == words
    for name in ("one", "many"):
        assert run("tokenizer", "train", tmp_path / f"{name}.txt", "--out", tmp_path / name,
                   "--vocab-size", "300").exit_code == 0
    assert vocab_lines(tmp_path / "one") == vocab_lines(tmp_path / "many")
    ideographic = "\u3000".join(["abcdef"] * 30_000)  # CJK text: no space, but U+3000 between words
    pieces = list(_cut_at_spaces(ideographic))
    assert len(pieces) > 2 and "".join(pieces) == ideographic
    assert all(word == "abcdef" for piece in pieces for word in piece.split("\u3000") if word)


def test_characters_their_neighbours_change_are_in_the_alphabet(tmp_path: Path) -> None:
    """Pass 1 counts code points one by one; a character the normaliser changes by its neighbours (NFC composing
    decomposed accents or Hangul jamo with accents kept, a word-final Σ lowercased to ς) must still be counted as
    encoding sees it, also in a line longer than LINE_CHARS (read in pieces) and not across table rows. Every word
    then encodes without [UNK], with transformers' pure-Python tokenizer's ids."""
    import unicodedata

    try:
        from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy
    except ImportError:  # transformers 4: BertTokenizer is the pure-Python one
        from transformers import BertTokenizer as BertTokenizerLegacy

    from bertctl import load_tokenizer
    from bertctl.tokenizer_train import LINE_CHARS

    nfd = unicodedata.normalize("NFD", "Café naïve résumé Ångström 한국어 ")
    filler = "plain words here "
    head = filler * (LINE_CHARS // len(filler) - 1)
    head += "x" * (LINE_CHARS - len(head) - 4) + " ca" + unicodedata.normalize("NFD", "ñ")  # ñ at the cut
    assert len(head) == LINE_CHARS + 1  # the ñ's n ends the first LINE_CHARS, its tilde comes after
    (tmp_path / "nfd.txt").write_text(head + " end\n" + (nfd * 3 + "\n") * 3, encoding="utf-8")
    (tmp_path / "greek.txt").write_text("ΟΔΥΣΣΕΥΣ ΚΑΙ ΠΗΝΕΛΟΠΗ ΛΟΓΟΣ\n" * 3, encoding="utf-8")
    (tmp_path / "rows.jsonl").write_text('{"text": "ΑΓΟΣ"}\n{"text": "ΑΓΑ"}\n' * 3, encoding="utf-8")
    cases = {"cased": ("nfd.txt", "--cased"), "accents": ("nfd.txt", "--keep-accents"),
             "greek": ("greek.txt", "--lowercase"), "rows": ("rows.jsonl", "--lowercase")}
    for name, (source, flag) in cases.items():
        result = run("tokenizer", "train", tmp_path / source, "--out", tmp_path / name, "--vocab-size", "200", flag)
        assert result.exit_code == 0, result.output
        ours, ref = load_tokenizer(tmp_path / name), BertTokenizerLegacy.from_pretrained(tmp_path / name)
        texts = ["ΑΓΟΣ ΑΓΑ"] if name == "rows" else (tmp_path / source).read_text(encoding="utf-8").split()
        for text in texts:
            ids = ours.encode(text).ids
            assert ids == ref(text)["input_ids"] and ours.unk_id not in ids, (name, text, ref.tokenize(text))
    assert "\u0301" not in vocab_lines(tmp_path / "cased") and "ñ" in vocab_lines(tmp_path / "cased")
    assert "ς" in vocab_lines(tmp_path / "rows")


def test_the_order_of_inputs_and_lines_does_not_change_the_vocabulary(corpus: Path, tmp_path: Path) -> None:
    lines = (corpus / "texts" / "part1.txt").read_text(encoding="utf-8").splitlines()
    (tmp_path / "a.txt").write_text("\n".join(lines[:len(lines) // 2]) + "\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("\n".join(lines[len(lines) // 2:]) + "\n", encoding="utf-8")
    (tmp_path / "r.txt").write_text("\n".join(reversed(lines)) + "\n", encoding="utf-8")
    for name, inputs in (("ab", ["a.txt", "b.txt"]), ("ba", ["b.txt", "a.txt"]), ("r", ["r.txt"])):
        assert run("tokenizer", "train", *(tmp_path / i for i in inputs), "--out", tmp_path / name,
                   "--vocab-size", "700").exit_code == 0
    assert vocab_lines(tmp_path / "ab") == vocab_lines(tmp_path / "ba") == vocab_lines(tmp_path / "r")


@pytest.mark.parametrize(("text", "size", "limit", "expected"), [
    ("b b ab\n", 9, 1000, ["a", "b", "##a", "##b"]),  # the alphabet in code point order, not by count
    ("abc cab\n", 9, 2, ["a", "b", "##a", "##b"]),  # a tie at --limit-alphabet keeps the lower code points
    ("a, b.\n", 11, 1000, [",", ".", "a", "b", "##a", "##b"]),  # punctuation always stands alone: no ##,
])
def test_a_vocabulary_of_exactly_the_fixed_tokens_is_accepted(tmp_path: Path, text: str, size: int, limit: int,
                                                              expected: list[str]) -> None:
    """--vocab-size may equal the specials plus the alphabet and its ##characters (the smallest size the refusal
    names); spaces and line breaks are never characters of the alphabet, and no [unused] warning comes when none
    is added."""
    (tmp_path / "x.txt").write_text(text, encoding="utf-8")
    result = run("tokenizer", "train", tmp_path / "x.txt", "--out", tmp_path / "tok", "--vocab-size", size,
                 "--limit-alphabet", limit)
    assert result.exit_code == 0, result.output
    assert vocab_lines(tmp_path / "tok") == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *expected]
    assert "placeholders" not in result.output


def test_a_vocabulary_mostly_unused_is_warned_about(tmp_path: Path) -> None:
    (tmp_path / "tiny.txt").write_text("the cat sat on the mat\nthe dog sat\n", encoding="utf-8")
    result = run("tokenizer", "train", tmp_path / "tiny.txt", "--out", tmp_path / "tok", "--vocab-size", "200")
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "tok" / "provenance.json").read_text())
    assert record["alphabet"] == 11 and record["unused"] > 100
    assert f"so {record['unused']} of the 200 entries are [unused] placeholders" in result.output


@pytest.mark.parametrize(("flags", "learned"), [((), ["cd"]), (("--min-frequency", "1"), ["cd", "ab"])])
def test_only_pairs_seen_min_frequency_times_are_merged(tmp_path: Path, flags: tuple[str, ...],
                                                        learned: list[str]) -> None:
    (tmp_path / "x.txt").write_text("ab cd cd\n", encoding="utf-8")
    result = run("tokenizer", "train", tmp_path / "x.txt", "--out", tmp_path / "tok", "--vocab-size", "20", *flags)
    assert result.exit_code == 0, result.output
    tokens = vocab_lines(tmp_path / "tok")
    assert tokens[13:13 + len(learned) + 1] == [*learned, "[unused0]"]


@pytest.mark.parametrize(("flags", "word", "absent"), [
    (("--keep-accents",), "café", "cafe"),  # lowercased, accents kept: pieces are learned with their accents
    (("--cased", "--strip-accents"), "Cafe", "café"),  # cased, accents stripped
])
def test_pieces_are_learned_from_text_normalised_as_the_flags_say(tmp_path: Path, flags: tuple[str, ...],
                                                                    word: str, absent: str) -> None:
    """The trainer sees the text as the saved tokenizer encodes it: a piece learned from text normalised
    otherwise would never be produced (and a word the saved tokenizer sees would go unlearned)."""
    (tmp_path / "x.txt").write_text("Café Café Café\n", encoding="utf-8")
    result = run("tokenizer", "train", tmp_path / "x.txt", "--out", tmp_path / "tok", "--vocab-size", "40", *flags)
    assert result.exit_code == 0, result.output
    tokens = vocab_lines(tmp_path / "tok")
    assert word in tokens and absent not in tokens and absent.lower() not in tokens
