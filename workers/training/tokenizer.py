"""The tokenizer adapter: a word vocabulary learned from the training texts (no download), saved
with the version, and token rows padded per batch to the batch's longest text.

Tokens are the text type's own words (``workers.features.text.words``: lower-cased letter runs).
Ids: 0 pad, 1 unknown word, 2 the leading ``[CLS]`` (every row has one, so no row is all padding),
3 the separator between two text features; then the vocabulary, most frequent first (ties by the
word). A row keeps its first ``max_tokens`` tokens. The planner sizes a batch of the longest rows
(``TokenRows.planning_index``): the longest text in the data, not a typical one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from workers.features.text import words
from workers.training.adapters import register_adapter
from workers.training.batches import TensorRows, select, to_device
from workers.training.tabular import Encoder

PAD, UNK, CLS, SEP = 0, 1, 2, 3
SPECIAL = 4
DEFAULT_MAX_TOKENS = 128
DEFAULT_VOCAB_SIZE = 8000


@dataclass
class TokenizerAdapter:
    kind: ClassVar[str] = "tokenizer"

    vocabulary: list[str]  # id SPECIAL + i is vocabulary[i]
    texts: list[str]  # the text features, in order
    max_tokens: int
    encoder: Encoder  # the tabular features beside the texts

    @classmethod
    def fit(cls, frame: pd.DataFrame, schema: dict[str, Any]) -> TokenizerAdapter:
        options = schema.get("hyperparameters") or {}
        texts = [n for n, t in schema["features"].items() if t == "text"]
        tabular = {n: t for n, t in schema["features"].items() if t in ("numerical", "categorical")}
        counts: Counter[str] = Counter()
        for name in texts:
            for text in frame[name]:
                counts.update(words(text) if isinstance(text, str) else [])
        size = max(0, int(options.get("vocab_size", DEFAULT_VOCAB_SIZE)) - SPECIAL)
        vocabulary = [w for w, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:size]]
        max_tokens = int(options.get("max_tokens", DEFAULT_MAX_TOKENS))
        return cls(vocabulary, texts, max_tokens, Encoder.fit(frame, tabular))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TokenizerAdapter:
        return cls(
            list(data["vocabulary"]), list(data["texts"]), int(data["max_tokens"]),
            Encoder.from_dict(data["tabular"]),
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {
            "vocabulary": self.vocabulary,
            "texts": self.texts,
            "max_tokens": self.max_tokens,
            "tabular": self.encoder.to_dict(),
        }

    def schema_fields(self) -> dict[str, Any]:
        return {
            "vocab_size": SPECIAL + len(self.vocabulary),
            "max_tokens": self.max_tokens,
            "tabular_width": self.encoder.width,
        }

    def encode(self, row: list[Any]) -> list[int]:
        index = self._index()
        ids = [CLS]
        for i, text in enumerate(row):
            if i:
                ids.append(SEP)
            ids += [index.get(w, UNK) for w in words(text if isinstance(text, str) else "")]
        return ids[: self.max_tokens]

    def _index(self) -> dict[str, int]:
        if getattr(self, "_ids", None) is None:
            self._ids = {w: SPECIAL + i for i, w in enumerate(self.vocabulary)}
        return self._ids

    def inputs(self, frame: pd.DataFrame) -> Any:
        """``{"tokens": (n, longest) int64[, "tabular": (n, width)]}``, right-padded with 0."""
        import torch  # lazy: see the package docstring

        rows = [self.encode(list(r)) for r in frame[self.texts].itertuples(index=False)]
        tokens = np.zeros((len(rows), max((len(r) for r in rows), default=1)), dtype="int64")
        for i, ids in enumerate(rows):
            tokens[i, : len(ids)] = ids
        inputs = {"tokens": torch.from_numpy(tokens)}
        if self.encoder.width:
            inputs["tabular"] = torch.from_numpy(self.encoder.transform(frame))
        return inputs

    def rows(self, inputs: Any, targets: Any) -> TokenRows:
        return TokenRows(inputs, targets)


register_adapter(TokenizerAdapter)


@dataclass(frozen=True)
class TokenRows(TensorRows):
    """Token rows, each batch cut to its own longest row (padding past it is never computed)."""

    def rows(self, start: int, stop: int) -> TokenRows:
        return TokenRows(select(self.inputs, slice(start, stop)), self.targets[start:stop])

    def lengths(self) -> Any:
        return (self.inputs["tokens"] != PAD).sum(dim=1)

    def batch(self, index: Any, device: Any = "cpu") -> tuple[Any, Any]:
        inputs = select(self.inputs, index)
        width = max(1, int((inputs["tokens"] != PAD).sum(dim=1).max())) if len(index) else 1
        inputs = {**inputs, "tokens": inputs["tokens"][:, :width]}
        return to_device(inputs, device), self.targets[index].to(device)

    def planning_index(self, n: int) -> Any:
        """``n`` rows, the longest first (cycled past the data): the batch the planner sizes."""
        import torch  # lazy: see the package docstring

        order = torch.argsort(self.lengths(), descending=True, stable=True)
        return order[torch.arange(n) % len(order)]
