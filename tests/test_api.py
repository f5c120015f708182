"""The Python API as a user meets it: commands called through their modules, errors that stay one line, global
state left as it was."""

from __future__ import annotations

import subprocess
import sys


def test_commands_are_called_through_their_modules_as_the_cli_calls_them():
    """`bertctl.pretrain.pretrain(cfg)` (STYLE.md): with `import bertctl` alone, before and after the module is
    imported, and without importing torch until a command module is touched."""
    code = ("import sys, bertctl\n"
            "names = ['pretrain', 'fill', 'info', 'convert']\n"
            "assert set(names) <= set(dir(bertctl)) and 'torch' not in sys.modules\n"
            "assert all(callable(getattr(getattr(bertctl, n), n)) for n in names)\n"
            "import bertctl.pretrain\n"
            "from bertctl import fill\n"
            "assert bertctl.pretrain is sys.modules['bertctl.pretrain'] and callable(fill.fill)\n")
    _runs_clean(code)


def test_bad_arguments_from_python_are_one_line_usage_errors(tmp_path):
    import json

    import numpy as np
    import pandas as pd
    import pytest
    import torch

    import bertctl
    from bertctl.model import BertForMaskedLM, BertForSequenceClassification

    tok = bertctl.BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"])
    config = bertctl.BertConfig(vocab_size=7, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=16, max_position_embeddings=16)
    torch.manual_seed(0)
    mlm = bertctl.save_model(BertForMaskedLM(config), tmp_path / "mlm", tok)
    classifier = BertForSequenceClassification(config, num_labels=2)
    table = pd.DataFrame({"k": [8]})  # its repr spans lines
    calls = [
        (lambda: bertctl.save_model(classifier, tmp_path / "c1", tok, labels=["x", "x"]), "give 2 different names"),
        (lambda: bertctl.save_model(classifier, tmp_path / "c2", tok, labels="xy"), "give 2 different names"),
        (lambda: bertctl.save_model(classifier, tmp_path / "c5", tok, labels=np.array(["x", "x"])),
         "^labels \\['x', 'x'\\]: give 2 different names"),  # the array's truth value was a bare ValueError
        (lambda: bertctl.save_model(classifier, tmp_path / "c6", tok, labels=["x", {}]), "give 2 different names"),
        (lambda: bertctl.save_model(classifier, tmp_path / "c7", tok, labels=5), "^labels 5: give 2 different"),
        (lambda: bertctl.save_model(classifier, tmp_path / "c3", tmp_path / "nope"), "has no tokenizer.json"),
        (lambda: bertctl.save_model(classifier, tmp_path / "c4", tok, problem_type="x"), "problem_type 'x'"),
        (lambda: bertctl.fill.fill(["a [MASK]"], mlm, batch_size=0), "--batch-size must be at least 1"),
        (lambda: bertctl.fill.fill("a [MASK]", mlm), "a list of texts"),
        (lambda: bertctl.load_model(None), "no model given"),
        (lambda: bertctl.load_model(5), "^model: give a folder or a hub id, not 5$"),  # was looked up on the hub
        (lambda: bertctl.load_model(mlm, "BertModel", add_pooler="no"), "^add_pooler must be true or false, got 'no'$"),
        (lambda: bertctl.load_model(mlm, "BertModel", add_pooler="False"),
         "^add_pooler must be true or false, got 'False', text in quotes; write false without them$"),
        (lambda: bertctl.load_model(mlm, "BertForSequenceClassification", classifier_dropout="x"),
         "^classifier_dropout must be a number in \\[0, 1\\], got 'x'$"),  # a TypeError in torch
        (lambda: bertctl.BertConfig.from_dict(None), "^model config: give a mapping of config fields, not None$"),
        (lambda: bertctl.load_model(["m"]), "^model: give a folder or a hub id, not \\['m'\\]$"),  # was a TypeError
        # a dict, None or another command's config was an AttributeError naming one of its fields
        (lambda: bertctl.pretrain.pretrain({"steps": 2}), "^pretrain: give a bertctl.PretrainConfig, not a dict$"),
        (lambda: bertctl.finetune_classify(bertctl.PretrainConfig()),
         "^finetune: give a bertctl.FinetuneConfig, not a PretrainConfig$"),
        (lambda: bertctl.build_corpus(None), "^build_corpus: give a bertctl.CorpusConfig, not None$"),
        (lambda: bertctl.import_corpus(bertctl.CorpusConfig()), "^import_corpus: give a bertctl.CorpusImportConfig"),
        (lambda: bertctl.train_tokenizer(None), "^train_tokenizer: give a bertctl.TokenizerTrainConfig, not None$"),
        (lambda: bertctl.save_model(None, tmp_path / "c8"), "^save_model: NoneType is not a bertctl BERT model"),
        (lambda: bertctl.predict_ner(mlm, tmp_path / "p.txt", None), "^--out: give a file or folder name, got None$"),
        (lambda: bertctl.predict_choice(mlm, tmp_path / "p.csv", None), "^--out: give a file or folder name, got None"),
        # a loaded model or a number for the model: every evaluate_*/predict_* was pathlib's bare TypeError, and
        # fill, info and convert quoted the model's many-line repr
        (lambda: bertctl.evaluate_mlm(classifier, tmp_path), "^model: give a folder or a hub id, not a BertFor"),
        (lambda: bertctl.predict_choice(5, tmp_path / "p.csv", tmp_path / "o.csv"), "^model: give a folder or a hub"),
        (lambda: bertctl.evaluate_glue("sst2", ["m"], tmp_path), "^model: give a folder or a hub id, not \\['m'\\]$"),
        (lambda: bertctl.fill.fill(["a [MASK]"], classifier), "^model: give a folder or a hub id, not a BertForSequ"),
        (lambda: bertctl.convert.convert(classifier, tmp_path / "c"), "^SOURCE: give a file or folder name, got a B"),
        (lambda: bertctl.fill.fill(["a [MASK]"], mlm, top_k=table), "^--top-k must be a whole number, got a DataFr"),
        (lambda: bertctl.predict_classify(mlm, table, tmp_path / "p.csv"), "^--data: give a file or folder name, got"),
        # transformers' tokenizer was "AttributeError: BertTokenizer has no attribute save"
        (lambda: bertctl.save_model(classifier, tmp_path / "c9", object()), "^save_model: object is not a bertctl Ber"),
    ]
    for call, message in calls:
        with pytest.raises(bertctl.UsageError, match=message) as error:
            call()
        assert "\n" not in str(error.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlm"]
    # pandas' unique() gives a numpy array; numpy's numbers were a TypeError of json once the weights were written
    for labels, id2label in ((np.array(["b", "a"]), {"0": "b", "1": "a"}), (np.arange(2) + 3, {"0": 3, "1": 4})):
        saved = bertctl.save_model(classifier, tmp_path / "c", tok, labels=labels, overwrite=True)
        assert json.loads((saved / "config.json").read_text())["id2label"] == id2label


def test_ner_label_names_and_entity_scores_take_lists_and_refuse_odd_ones_in_one_line(tmp_path):
    """`evaluate_ner(label_names=[...])`, as its signature allows, was "AttributeError: 'list' object has no
    attribute 'strip'", and `"O,,B-PER"` a bare ValueError (the CLI's too); `entity_scores` read a flat list of tags
    as sentences of one-letter tags, making up entities of type `_`."""
    import pandas as pd
    import pytest
    import torch

    import bertctl
    from bertctl.metrics import entity_scores
    from bertctl.model import BertForTokenClassification

    tok = bertctl.BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"])
    config = bertctl.BertConfig(vocab_size=7, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=16, max_position_embeddings=16)
    torch.manual_seed(0)
    tagger = bertctl.save_model(BertForTokenClassification(config, num_labels=2), tmp_path / "t", tok,
                                labels=["O", "B-PER"])
    data = tmp_path / "d.txt"
    data.write_text("a O\nb B-PER\n")
    given = bertctl.evaluate_ner(tagger, data, label_names=["O", "B-PER"])
    assert bertctl.evaluate_ner(tagger, data, label_names=("O", "B-PER")) == given == bertctl.evaluate_ner(tagger, data)
    odd = (("O,,B-PER", "'O,,B-PER'"), (["O", None], "\\['O', None\\]"), (pd.DataFrame({"k": ["O"]}), "a DataFrame"))
    for names, shown in odd:
        with pytest.raises(bertctl.UsageError, match=f"^--label-names must be a list of strings, got {shown}$"):
            bertctl.evaluate_ner(tagger, data, label_names=names)
    for gold, shown in ((["B-PER", "O"], "'B-PER'"), ([["B-PER", 1]], "\\['B-PER', 1\\]")):
        with pytest.raises(bertctl.BertctlError, match=f"^entity_scores: give each sentence's tags as a list of "
                                                         f"strings, not {shown}$"):
            entity_scores(gold, gold)


def test_tokenizer_methods_refuse_odd_arguments_in_one_line(tmp_path, monkeypatch):
    """What a Python caller gets wrong (None for a list, a generator of pairs, -100 label ids, "no" for a flag)
    was a TypeError, OverflowError or ValueError from tokenizers or a tuple lookup, or silently accepted."""
    import numpy as np
    import pytest
    import torch

    import bertctl

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "##b"]
    tok = bertctl.BertTokenizer.from_vocab(vocab)
    calls = [
        (lambda: tok.encode_batch(None), "^encode_batch: give lists of texts and pairs, not None$"),
        (lambda: tok.encode_batch(5), "^encode_batch: give lists of texts and pairs, not 5$"),
        (lambda: tok.encode_batch(["a"], 5), "^encode_batch: give lists of texts and pairs, not 5$"),
        (lambda: tok.encode("a", add_special_tokens="no"), "^add_special_tokens must be true or false"),
        (lambda: tok.decode(None), "^decode: give a list of token ids, not None$"),
        (lambda: tok.decode("ab"), "^decode: give a list of token ids, not 'ab'$"),
        (lambda: tok.decode([5, -100]), "^decode: token id -100 is negative"),
        (lambda: tok.decode([5, 1.5]), "^token id 1.5 is not a whole number$"),
        (lambda: tok.decode([5], skip_special_tokens="no"), "^skip_special_tokens must be true or false"),
        (lambda: tok.id_to_token(-1), "^token id -1 is outside the vocabulary of 8$"),
        (lambda: tok.id_to_token("5"), "^token id '5' is not a whole number$"),
        (lambda: tok.token_to_id(None), "^token_to_id: give a token string, not None$"),
        (lambda: tok.special_token("bos"), "^special token role 'bos': choose one of pad, unk, cls, sep, mask$"),
        (lambda: tok.save(None), "^folder: give a file or folder name, got None$"),
        (lambda: bertctl.BertTokenizer.from_vocab(None), "^from_vocab: give the tokens in id order"),
        (lambda: bertctl.BertTokenizer.from_vocab([*vocab, 5]), "^from_vocab: the token of id 8 is 5, not a string$"),
        (lambda: bertctl.BertTokenizer.from_vocab({"[PAD]": "0"}), "^from_vocab: token '\\[PAD\\]' has the id '0'"),
        (lambda: bertctl.BertTokenizer.from_vocab(vocab, lowercase="no"), "^lowercase must be true or false"),
        (lambda: bertctl.BertTokenizer.from_vocab(vocab, strip_accents=1), "^strip_accents must be true, false or"),
        (lambda: bertctl.load_tokenizer(["tok"]), "^tokenizer: give a folder or a hub id, not \\["),
        (lambda: bertctl.load_tokenizer(5), "^tokenizer: give a folder or a hub id, not 5$"),
        (lambda: bertctl.load_tokenizer(tmp_path, lowercase="no"), "^lowercase must be true, false or None"),
    ]
    for call, message in calls:
        with pytest.raises(bertctl.BertctlError, match=message) as error:
            call()
        assert "\n" not in str(error.value)
    # what they take: any iterable of texts and pairs, numpy's and torch's integers as ids
    assert [e.tokens for e in tok.encode_batch(["a"], (p for p in ["b"]))] == [["[CLS]", "a", "[SEP]", "b", "[SEP]"]]
    assert tok.decode(np.array([5, 6])) == tok.decode(torch.tensor([5, 6])) == tok.decode([5, 6]) == "a b"
    assert tok.decode([5, 10**6]) == "a"  # an id past the vocabulary gives nothing, as transformers' fast decode
    assert tok.id_to_token(np.int64(5)) == "a"
    # ~ is the home folder, not a folder named ~ here
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    tok.save("~/tok")
    assert bertctl.load_tokenizer("~/tok").sha256() == tok.sha256() and not (tmp_path / "~").exists()


def test_fill_leaves_the_callers_torch_generator_where_it_was(tmp_path):
    """Building the model drew its random initialisation (then overwritten by the saved weights) from the global
    generator, so `torch.manual_seed(0); fill(...); torch.rand(1)` gave other numbers than without the fill;
    transformers' from_pretrained draws nothing for a model whose weights are all saved."""
    import torch

    import bertctl
    from bertctl.model import BertForMaskedLM

    tok = bertctl.BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"])
    config = bertctl.BertConfig(vocab_size=7, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=16, max_position_embeddings=16)
    mlm = bertctl.save_model(BertForMaskedLM(config), tmp_path / "mlm", tok)
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    first = bertctl.fill.fill(["a [MASK]"], mlm, top_k=2)
    assert torch.equal(torch.rand(3), expected)
    assert bertctl.fill.fill(["a [MASK]"], mlm, top_k=2) == first
    torch.set_default_dtype(torch.float64)  # a notebook's: models load in float32 all the same, as transformers'
    try:
        assert bertctl.fill.fill(["a [MASK]"], mlm, top_k=2) == first
        assert {p.dtype for p in bertctl.load_model(mlm).parameters()} == {torch.float32}
        assert torch.get_default_dtype() == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)


def test_models_built_in_two_threads_at_once_leave_torchs_normal_init_as_it_was():
    """Loading a model swaps nn.init.normal_ for a no-op while its shapes are built on the meta device; two web app
    threads loading at once left the no-op in place for good (every later nn.Embedding, and any fresh head, kept
    uninitialised memory), and a thread building a real model meanwhile drew nothing."""
    import threading

    import torch
    from torch import nn

    from bertctl.model_building import shapes_only

    torchs = nn.init.normal_
    entered, release = threading.Event(), threading.Event()

    def first_load() -> None:
        with shapes_only():
            entered.set()
            release.wait(10)

    worker = threading.Thread(target=first_load)
    worker.start()
    entered.wait(10)
    drawn = nn.init.normal_(torch.zeros(1000))
    with shapes_only():  # the second load starts, and the first ends before it
        release.set()
        worker.join()
    left, nn.init.normal_ = nn.init.normal_, torchs  # for the tests after this one, even if it fails
    assert left is torchs and left.__module__ == "torch.nn.init"  # torch's own, whatever ran before this test
    assert 0.8 < float(drawn.std()) < 1.2


def test_warnings_held_in_one_thread_hide_its_own_only_however_the_blocks_overlap(caplog):
    """A file read again (GLUE's read-ahead, SQuAD's v2.0 re-read) held its logger's warnings by its level: two
    threads' blocks that overlapped left the level at ERROR for good, and other threads' warnings were lost."""
    import logging
    import threading

    from bertctl.errors import warnings_held

    log = logging.getLogger("bertctl.data.glue")
    entered, release = threading.Event(), threading.Event()

    def first_read() -> None:
        with warnings_held(log.name):
            entered.set()
            release.wait(10)
            log.warning("held")

    worker = threading.Thread(target=first_read)
    worker.start()
    entered.wait(10)
    with caplog.at_level(logging.WARNING):
        log.warning("said meanwhile")
        with warnings_held(log.name):  # the second read starts, and the first ends before it
            release.set()
            worker.join()
            log.warning("held too")
            log.error("an error is said")
        log.warning("said after")
    level = log.level
    log.setLevel(logging.NOTSET)  # for the tests after this one, even if this one fails
    assert [r.getMessage() for r in caplog.records] == ["said meanwhile", "an error is said", "said after"]
    assert level == logging.NOTSET and not log.filters


def test_functions_named_like_their_modules_stay_functions_once_the_modules_are_imported():
    """`bertctl.finetune_squad` (and `_ner`, `_choice`) share their module's name: importing the module, as the
    first call does, set the package attribute to it, so the second call was "'module' object is not callable"."""
    code = ("import importlib, pkgutil, types, bertctl\n"
            "first = {n: getattr(bertctl, n) for n in bertctl._LAZY}\n"
            "for info in pkgutil.walk_packages(bertctl.__path__, 'bertctl.'):\n"
            "    if info.name != 'bertctl.__main__':\n"
            "        importlib.import_module(info.name)\n"
            "from bertctl import finetune_ner\n"
            "again = {n: getattr(bertctl, n) for n in bertctl._LAZY}\n"
            "assert again == first and finetune_ner is first['finetune_ner'], "
            "[n for n in first if again[n] is not first[n]]\n"
            "assert not [n for n, f in first.items() if isinstance(f, types.ModuleType)]\n")
    _runs_clean(code)


def _runs_clean(code: str) -> None:
    """`code` passes in a fresh interpreter, where no earlier test has imported a bertctl module."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
