"""The ``text-classification`` recipe's model: a small transformer encoder built from torch.nn,
its size from the recipe's hyperparameters (``d_model``, ``heads``, ``layers``, ``ff``,
``dropout``) and its vocabulary and longest input from the tokenizer (``workers.training.tokenizer``).

Tokens plus learned positions go through ``nn.TransformerEncoder`` (padding masked), are
mean-pooled over the real tokens, joined with any tabular features and mapped to the outputs.
"""

from __future__ import annotations

from typing import Any


def text_encoder_factory(schema: dict[str, Any], hyperparameters: dict[str, Any]) -> Any:
    import torch  # lazy: torch costs ~1 s to import

    from workers.training.tokenizer import PAD

    class TextEncoder(torch.nn.Module):
        def __init__(self, hp: dict[str, Any]) -> None:
            super().__init__()
            d_model = int(hp.get("d_model", 64))
            self.tokens = torch.nn.Embedding(int(schema["vocab_size"]), d_model, padding_idx=PAD)
            self.positions = torch.nn.Embedding(int(schema["max_tokens"]), d_model)
            layer = torch.nn.TransformerEncoderLayer(
                d_model, int(hp.get("heads", 4)), int(hp.get("ff", 4 * d_model)),
                float(hp.get("dropout", 0.1)), batch_first=True,
            )  # fmt: skip
            self.encoder = torch.nn.TransformerEncoder(
                layer, int(hp.get("layers", 2)), enable_nested_tensor=False
            )
            self.head = torch.nn.Linear(
                d_model + int(schema.get("tabular_width", 0)), int(schema["output_width"])
            )

        def forward(self, tokens: torch.Tensor, tabular: torch.Tensor | None = None) -> torch.Tensor:
            pad = tokens == PAD
            where = torch.arange(tokens.shape[1], device=tokens.device)
            hidden = self.encoder(self.tokens(tokens) + self.positions(where), src_key_padding_mask=pad)
            keep = (~pad).unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1.0)
            if tabular is not None:
                pooled = torch.cat([pooled, tabular.to(pooled.dtype)], dim=1)
            return self.head(pooled)

    return TextEncoder(hyperparameters)
