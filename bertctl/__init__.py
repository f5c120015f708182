"""bertctl: BERT end to end on one model core.

The public Python API is imported lazily so that `import bertctl` (and `bertctl --help`) never pulls in torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "BertConfig": "bertctl.config",
    "TokenizerTrainConfig": "bertctl.config",
    "CorpusConfig": "bertctl.config",
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
    "inspect_corpus": "bertctl.corpus",
    "pretrain": "bertctl.pretrain",
    "finetune_glue": "bertctl.finetune",
    "finetune_classify": "bertctl.finetune",
    "evaluate_glue": "bertctl.evaluate",
    "evaluate_classify": "bertctl.evaluate",
    "predict_glue": "bertctl.predict",
    "predict_classify": "bertctl.predict",
    "fill": "bertctl.fill",
    "convert": "bertctl.convert",
    "info": "bertctl.info",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'bertctl' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
