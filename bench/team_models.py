"""The team's own model for bench/deep_retrain.py's custom-recipe case: a 1-d convolutional text
classifier, built by a factory the platform imports only from a module the operator allowed
(``DRIFTWATCH_RECIPE_MODULES``; the bench allows this one), over the built-in tokenizer's tokens.

No leading underscore in this module's name: an allowed module has no private part."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def cnn_text_factory(schema: dict[str, Any], hyperparameters: dict[str, Any]) -> nn.Module:
    """Embedding, two 1-d convolutions, max over time, a linear head; ``schema`` carries the
    tokenizer's ``vocab_size`` and the target's ``output_width``."""
    width = int(hyperparameters.get("width", 128))
    kernel = int(hyperparameters.get("kernel", 5))
    return CnnText(int(schema["vocab_size"]), width, kernel, int(schema["output_width"]))


class CnnText(nn.Module):
    def __init__(self, vocab: int, width: int, kernel: int, outputs: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width, padding_idx=0)
        self.convs = nn.Sequential(
            nn.Conv1d(width, width, kernel, padding=kernel // 2),
            nn.ReLU(),
            nn.Conv1d(width, width, kernel, padding=kernel // 2),
            nn.ReLU(),
        )
        self.head = nn.Linear(width, outputs)

    def forward(self, tokens: torch.Tensor, tabular: torch.Tensor | None = None) -> torch.Tensor:
        hidden = self.convs(self.embed(tokens).transpose(1, 2))
        return self.head(hidden.max(dim=2).values)
