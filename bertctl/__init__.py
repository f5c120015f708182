"""bertctl: BERT end to end on one model core.

The public Python API is imported lazily so that `import bertctl` (and `bertctl --help`) never pulls in torch.
Four functions share their module's name (`pretrain`, `fill`, `convert`, `info`): `bertctl.pretrain` is always
the function; the module is `sys.modules["bertctl.pretrain"]` (or `from bertctl.pretrain import ...`).
"""

from __future__ import annotations

import importlib
import sys
import types
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


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


class _Package(types.ModuleType):
    """Importing the submodule bertctl.pretrain sets the package's `pretrain` to that module, which would hide
    the function from then on; such a module is not stored, so the name keeps resolving to the function."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and _LAZY.get(name) == f"{__name__}.{name}":
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
