"""Shared fixtures for the trainer tests: a small deterministic corpus and tiny model."""

import pytest
import torch

from trainer.data import Corpus, synthetic_text
from trainer.model import GPTConfig


@pytest.fixture(scope="session")
def corpus() -> Corpus:
    torch.set_num_threads(1)
    return Corpus(synthetic_text(120_000, seed=7))


@pytest.fixture(scope="session")
def tiny_cfg() -> GPTConfig:
    return GPTConfig.preset("tiny")
