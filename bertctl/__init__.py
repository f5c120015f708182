"""bertctl: BERT end to end on one model core.

The public Python API is imported lazily so that `import bertctl` (and `bertctl --help`) never pulls in torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "BertConfig": "bertctl.config",
    "preset": "bertctl.config",
    "BertctlError": "bertctl.errors",
    "UsageError": "bertctl.errors",
    "load_model": "bertctl.checkpoint",
    "save_model": "bertctl.checkpoint",
    "load_tokenizer": "bertctl.tokenizer",
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
