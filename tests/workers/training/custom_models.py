"""A team's own model and input adapter, as the README's example module: allowed in tests only."""

from typing import Any, ClassVar

import torch

from workers.training.tokenizer import TokenizerAdapter


def conv_text_factory(schema: dict[str, Any], hyperparameters: dict[str, Any]) -> torch.nn.Module:
    """A 1-d CNN over the tokenizer's tokens; schema carries vocab_size, output_width."""
    width = int(hyperparameters.get("width", 64))
    return ConvText(int(schema["vocab_size"]), width, int(schema["output_width"]))


class ConvText(torch.nn.Module):
    def __init__(self, vocab: int, width: int, outputs: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width, padding_idx=0)
        self.conv = torch.nn.Conv1d(width, width, kernel_size=3, padding=1)
        self.head = torch.nn.Linear(width, outputs)

    def forward(self, tokens: torch.Tensor, tabular: torch.Tensor | None = None) -> torch.Tensor:
        hidden = torch.relu(self.conv(self.embed(tokens).transpose(1, 2)))
        return self.head(hidden.max(dim=2).values)


class ShortTokens(TokenizerAdapter):
    """The built-in tokenizer, keeping only the first 8 tokens of a row."""

    kind: ClassVar[str] = "test-short-tokens"

    def encode(self, row: list[Any]) -> list[int]:
        return super().encode(row)[:8]
