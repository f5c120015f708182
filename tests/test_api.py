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
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_bad_arguments_from_python_are_one_line_usage_errors(tmp_path):
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
    calls = [
        (lambda: bertctl.save_model(classifier, tmp_path / "c1", tok, labels=["x", "x"]), "give 2 different names"),
        (lambda: bertctl.save_model(classifier, tmp_path / "c2", tok, labels="xy"), "give 2 different names"),
        (lambda: bertctl.save_model(classifier, tmp_path / "c3", tmp_path / "nope"), "has no tokenizer.json"),
        (lambda: bertctl.save_model(classifier, tmp_path / "c4", tok, problem_type="x"), "problem_type 'x'"),
        (lambda: bertctl.fill.fill(["a [MASK]"], mlm, batch_size=0), "--batch-size must be at least 1"),
        (lambda: bertctl.fill.fill("a [MASK]", mlm), "a list of texts"),
        (lambda: bertctl.load_model(None), "no model given"),
    ]
    for call, message in calls:
        with pytest.raises(bertctl.UsageError, match=message) as error:
            call()
        assert "\n" not in str(error.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlm"]
