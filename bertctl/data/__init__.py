"""Datasets bertctl reads: the pre-training corpus, GLUE and the user's own labelled tables."""
