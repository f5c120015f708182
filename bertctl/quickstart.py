"""The no-argument quick start: bundled novels -> WordPiece tokenizer -> corpus -> a small BERT.

The text is Jane Austen's six novels (public domain; provenance in bertctl/resources/README.md). Tokenizer
and corpus are built once into RUN/data and reused when the quick start runs again in RUN: with `--resume`
once RUN holds a checkpoint (a plain rerun is refused then, as for any run folder).
"""

from __future__ import annotations

import dataclasses
import math
from importlib import resources
from pathlib import Path

from bertctl.config import CorpusConfig, PretrainConfig, TokenizerTrainConfig
from bertctl.errors import say
from bertctl.files import empty_folders_undone
from bertctl.tokenizer_folder import has_tokenizer
from bertctl.training import Distributed, barrier

VOCAB_SIZE = 8192  # enough for six novels; a smaller embedding matrix keeps the CPU run short
MAX_SEQ_LENGTH = 64
# 40% of the tokens to predict, not the paper's 15% (Wettig et al. 2023, "Should You Mask 15% in Masked Language
# Modeling?"): measured on the quick start, a tiny model at 15% stays at frequent words and punctuation for
# ~2,700 steps before it starts to use the context; at 40% it gets there within the run (docs/pretraining.md).
MASKED_LM_PROB = 0.4
MAX_PREDICTIONS_PER_SEQ = math.ceil(MASKED_LM_PROB * MAX_SEQ_LENGTH)  # never the limit


def bundled_text() -> Path:
    return Path(str(resources.files("bertctl") / "resources" / "austen.txt.gz"))


def prepare_quickstart(cfg: PretrainConfig, env: Distributed) -> PretrainConfig:
    """Build (or reuse) RUN/data/tokenizer and RUN/data/corpus; returns cfg pointing at that corpus."""
    from bertctl.corpus import build_corpus
    from bertctl.tokenizer_train import train_tokenizer

    data = Path(cfg.out) / "data"
    tokenizer, corpus = data / "tokenizer", data / "corpus"
    text = str(bundled_text())
    if env.is_main:
        with empty_folders_undone(data):  # a failure keeps only complete work: the tokenizer, the shards
            if not has_tokenizer(tokenizer):
                say(f"quick start: training a {VOCAB_SIZE}-token WordPiece vocabulary on {text}")
                train_tokenizer(TokenizerTrainConfig(inputs=(text,), out=tokenizer, vocab_size=VOCAB_SIZE))
            if not (corpus / "manifest.json").is_file():
                say(f"quick start: building pre-training instances of {MAX_SEQ_LENGTH} tokens, {MASKED_LM_PROB:.0%} "
                    f"masked, into {corpus}")
                build_corpus(CorpusConfig(inputs=(text,), tokenizer=tokenizer, out=corpus,
                                          max_seq_length=MAX_SEQ_LENGTH, masked_lm_prob=MASKED_LM_PROB,
                                          max_predictions_per_seq=MAX_PREDICTIONS_PER_SEQ, validation_fraction=0.02,
                                          seed=cfg.seed))
    barrier(env)
    return dataclasses.replace(cfg, corpus=corpus)

