"""A small PyTorch tabular classifier: encoding, training, prediction, (de)serialisation.

Used by the demo and by retraining. No Django imports. torch is imported lazily: the web
process imports this module's callers without needing torch at start-up.
"""

import io
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from workers.features import Encoding, feature_type


@dataclass
class Encoder:
    """Standardises numerical features and one-hot encodes categorical ones (unknown → all 0)."""

    numerical: list[str]
    categorical: list[str]
    means: dict[str, float] = field(default_factory=dict)
    stds: dict[str, float] = field(default_factory=dict)
    vocab: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def fit(cls, frame: pd.DataFrame, feature_types: dict[str, str]) -> "Encoder":
        encodings = {name: _tabular_encoding(name, kind) for name, kind in feature_types.items()}
        enc = cls(
            numerical=[n for n, e in encodings.items() if e == "number"],
            categorical=[n for n, e in encodings.items() if e == "category"],
        )
        for name in enc.numerical:
            col = pd.to_numeric(frame[name], errors="coerce")
            enc.means[name] = float(col.mean()) if col.notna().any() else 0.0
            enc.stds[name] = float(col.std()) if col.notna().sum() > 1 and col.std() > 0 else 1.0
        for name in enc.categorical:
            enc.vocab[name] = sorted(frame[name].dropna().astype(str).unique().tolist())
        return enc

    @property
    def width(self) -> int:
        return len(self.numerical) + sum(len(v) for v in self.vocab.values())

    def transform(self, frame: pd.DataFrame) -> np.ndarray:
        parts = []
        for name in self.numerical:
            col = pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype="float64")
            col = np.where(np.isfinite(col), col, self.means[name])  # missing → mean
            parts.append(((col - self.means[name]) / self.stds[name])[:, None])
        for name in self.categorical:
            values = frame[name].astype(str).to_numpy()
            vocab = np.asarray(self.vocab[name], dtype=object)
            parts.append((values[:, None] == vocab[None, :]).astype("float64"))
        return (
            np.concatenate(parts, axis=1).astype("float32") if parts else np.zeros((len(frame), 0), "float32")
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "numerical": self.numerical,
            "categorical": self.categorical,
            "means": self.means,
            "stds": self.stds,
            "vocab": self.vocab,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Encoder":
        return cls(**data)


def _tabular_encoding(name: str, kind: str) -> Encoding:
    """How the feature's registered type enters the matrix: standardised number or one-hot."""
    encoding = feature_type(kind).encoding
    if encoding is None:
        raise ValueError(f"feature {name!r}: type {kind!r} has no tabular encoding")
    return encoding


@dataclass
class TargetCodec:
    """Labels to training targets and back: class indices, or a standardised regression target."""

    classes: list[Any] | None = None
    mean: float = 0.0
    std: float = 1.0

    @classmethod
    def fit(cls, labels: list[Any], *, task: str, classes: list[Any] | None) -> "TargetCodec":
        if task == "classification":
            return cls(classes=list(classes or []))
        values = np.asarray(labels, dtype="float64")
        std = float(values.std()) if len(values) > 1 and values.std() > 0 else 1.0
        return cls(classes=None, mean=float(values.mean()) if len(values) else 0.0, std=std)

    @property
    def width(self) -> int:
        return len(self.classes) if self.classes is not None else 1

    def encode(self, labels: list[Any]) -> np.ndarray:
        if self.classes is not None:
            index = {str(c): i for i, c in enumerate(self.classes)}
            return np.asarray([index[str(v)] for v in labels], dtype="int64")
        return ((np.asarray(labels, dtype="float64") - self.mean) / self.std).astype("float32")

    def decode(self, outputs: np.ndarray) -> list[Any]:
        if self.classes is not None:
            return [self.classes[i] for i in outputs.argmax(axis=1)]
        return (outputs.reshape(-1) * self.std + self.mean).astype("float64").tolist()

    def to_dict(self) -> dict[str, Any]:
        return {"classes": self.classes, "mean": self.mean, "std": self.std}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TargetCodec":
        return cls(**data)


def build_mlp(in_features: int, n_classes: int, hidden: int = 32, layers: int = 2) -> Any:
    import torch.nn as nn  # lazy: torch costs ~1 s to import

    modules: list[Any] = []
    width = in_features
    for _ in range(layers):
        modules += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    modules.append(nn.Linear(width, n_classes))
    return nn.Sequential(*modules)


def mlp_factory(schema: dict[str, Any], hyperparameters: dict[str, Any]) -> Any:
    """The built-in recipes' factory: an MLP from the encoded width to the output width."""
    return build_mlp(
        int(schema["input_width"]),
        int(schema["output_width"]),
        int(hyperparameters.get("hidden", 32)),
        int(hyperparameters.get("layers", 2)),
    )


@dataclass
class TabularClassifier:
    encoder: Encoder
    classes: list[Any]
    hidden: int
    net: Any

    def predict_proba(self, frame: pd.DataFrame) -> np.ndarray:
        import torch  # lazy: see the package docstring

        self.net.eval()
        with torch.no_grad():
            logits = self.net(torch.from_numpy(self.encoder.transform(frame)))
            return torch.softmax(logits, dim=1).numpy().astype("float64")

    def predict(self, frame: pd.DataFrame) -> list[Any]:
        return [self.classes[i] for i in self.predict_proba(frame).argmax(axis=1)]

    def to_bytes(self) -> bytes:
        import torch  # lazy: see the package docstring

        buffer = io.BytesIO()
        torch.save(
            {
                "state_dict": self.net.state_dict(),
                "encoder": self.encoder.to_dict(),
                "classes": self.classes,
                "hidden": self.hidden,
            },
            buffer,
        )
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, raw: bytes) -> "TabularClassifier":
        import torch  # lazy: see the package docstring

        data = torch.load(io.BytesIO(raw), weights_only=True)
        encoder = Encoder.from_dict(data["encoder"])
        net = build_mlp(encoder.width, len(data["classes"]), data["hidden"])
        net.load_state_dict(data["state_dict"])
        return cls(encoder, list(data["classes"]), data["hidden"], net)


def train_tabular_classifier(
    frame: pd.DataFrame,
    labels: list[Any],
    *,
    feature_types: dict[str, str],
    classes: list[Any],
    hidden: int = 32,
    epochs: int = 30,
    batch_size: int = 256,
    lr: float = 1e-2,
    seed: int = 0,
) -> TabularClassifier:
    """Adam on cross-entropy; deterministic for a given seed."""
    import torch  # lazy: see the package docstring

    torch.manual_seed(seed)
    encoder = Encoder.fit(frame, feature_types)
    x = torch.from_numpy(encoder.transform(frame))
    index = {str(c): i for i, c in enumerate(classes)}
    y = torch.tensor([index[str(v)] for v in labels], dtype=torch.long)
    net = build_mlp(encoder.width, len(classes), hidden)
    optimizer = torch.optim.Adam(net.parameters(), lr=lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=generator)
        for start in range(0, len(x), batch_size):
            batch = order[start : start + batch_size]
            optimizer.zero_grad()
            loss_fn(net(x[batch]), y[batch]).backward()
            optimizer.step()
    return TabularClassifier(encoder, list(classes), hidden, net)
