"""bertctl: BERT end to end on one model core.

The public Python API is imported lazily so that `import bertctl` (and `bertctl --help`) never pulls in torch.
A command whose module bears its name is called through the module, as the CLI calls it:
`bertctl.pretrain.pretrain(cfg)`, `bertctl.fill.fill(texts, model)`, `bertctl.info.info(model)`,
`bertctl.convert.convert(src, dst)`.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "BertConfig": "bertctl.config",
    "TokenizerTrainConfig": "bertctl.config",
    "CorpusConfig": "bertctl.config",
    "CorpusImportConfig": "bertctl.config",
    "PretrainConfig": "bertctl.config",
    "FinetuneConfig": "bertctl.config",
    "preset": "bertctl.config",
    "BertctlError": "bertctl.errors",
    "UsageError": "bertctl.errors",
    "load_model": "bertctl.checkpoint",
    "save_model": "bertctl.checkpoint",
    "BertTokenizer": "bertctl.tokenizer",
    "load_tokenizer": "bertctl.tokenizer_folder",
    "train_tokenizer": "bertctl.tokenizer_train",
    "build_corpus": "bertctl.corpus",
    "load_corpus": "bertctl.corpus",
    "inspect_corpus": "bertctl.corpus_inspect",
    "import_corpus": "bertctl.corpus_import",
    "finetune_glue": "bertctl.finetune",
    "finetune_classify": "bertctl.finetune",
    "finetune_squad": "bertctl.finetune_qa",
    "finetune_ner": "bertctl.finetune_tagging",
    "finetune_choice": "bertctl.finetune_multiple_choice",
    "evaluate_glue": "bertctl.evaluate",
    "evaluate_classify": "bertctl.evaluate",
    "evaluate_mlm": "bertctl.mlm_eval",
    "evaluate_squad": "bertctl.squad",
    "evaluate_ner": "bertctl.ner",
    "evaluate_choice": "bertctl.choice",
    "predict_glue": "bertctl.predict",
    "predict_classify": "bertctl.predict",
    "predict_squad": "bertctl.squad",
    "predict_ner": "bertctl.ner",
    "predict_choice": "bertctl.choice",
}

_COMMAND_MODULES = ("pretrain", "fill", "convert", "info")  # named after their command function

__all__ = ["__version__", *_LAZY, *_COMMAND_MODULES]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        return getattr(importlib.import_module(module), name)
    if name in _COMMAND_MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'bertctl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_COMMAND_MODULES})
