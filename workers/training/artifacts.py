"""A version's artifact: weights (a state_dict) plus the recipe, schema and preprocessing.

Written as safetensors with the JSON in the header's metadata. Read from safetensors, or from a
``torch.save`` file with ``torch.load(weights_only=True)``: nothing is ever unpickled with the
full pickle machinery, so an artifact cannot run code when it is loaded. A malicious pickle is
refused with ArtifactError.

The recipe a file names is a client's string: ``read_bundle`` validates it (allowed factory
modules only, see ``recipes``) before anything is built, so an artifact naming any other module is
refused at upload and at load, ``Predictor`` included.
"""

from __future__ import annotations

import io
import json
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from workers.training.adapters import DEFAULT_ADAPTER, InputAdapter, adapter_class
from workers.training.batches import forward
from workers.training.modules import WeightsDoNotFit, module_factory
from workers.training.recipes import Recipe, check_code_path, recipe_from_dict
from workers.training.tabular import Encoder, TargetCodec

FORMAT = "driftwatch.v1"
METADATA_KEY = "driftwatch"


class ArtifactError(ValueError):
    """Weights that cannot be loaded (not a state_dict, unsafe pickle, wrong shapes)."""


@dataclass
class ModelBundle:
    recipe: Recipe
    schema: dict[str, Any]  # task, features {name: type}, classes, input_width, output_width
    adapter: InputAdapter  # samples -> model inputs (workers.training.adapters)
    target: TargetCodec
    state_dict: dict[str, Any]  # name -> torch.Tensor

    @property
    def encoder(self) -> Encoder | None:
        """The tabular adapter's Encoder (None for another input adapter)."""
        return getattr(self.adapter, "encoder", None)

    def build(self) -> Any:
        """The nn.Module with these weights loaded (strict: every key, every shape)."""
        try:
            return module_factory(self.recipe).build(self.schema, initial_state=self.state_dict)
        except WeightsDoNotFit as exc:
            raise ArtifactError(f"weights do not fit the recipe's model: {exc}") from exc

    def metadata(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "recipe": self.recipe.to_dict(),
            "schema": self.schema,
            # "encoder" holds the adapter's state whatever its kind (the key artifacts have had
            # since before adapters); "adapter" names the kind, tabular when absent.
            "preprocessing": {
                # an operator's adapter is found again by its allowed "module:Class"
                "adapter": self.recipe.adapter if ":" in self.recipe.adapter else str(self.adapter.kind),
                "encoder": self.adapter.to_dict(),
                "target": self.target.to_dict(),
            },
        }


def build_module(recipe: Recipe, schema: dict[str, Any]) -> Any:
    """The recipe's module with fresh weights (``workers.training.modules``)."""
    return module_factory(recipe).build(schema)


def bundle_to_bytes(bundle: ModelBundle) -> bytes:
    from safetensors.torch import save  # lazy: imports torch

    tensors = {k: v.detach().contiguous().cpu() for k, v in bundle.state_dict.items()}
    return save(tensors, metadata={METADATA_KEY: json.dumps(bundle.metadata(), sort_keys=True)})


def is_safetensors(raw: bytes) -> bool:
    if len(raw) < 10:
        return False
    (length,) = struct.unpack("<Q", raw[:8])
    return 0 < length <= len(raw) - 8 and raw[8:9] == b"{"


def bundle_from_bytes(raw: bytes, *, recipe: dict[str, Any] | None = None) -> ModelBundle:
    """Load an artifact; ``recipe`` (the version's stored recipe) is used when the file has none."""
    bundle = read_bundle(raw, recipe=recipe)
    restore_adapter(bundle)
    bundle.build()  # the weights must fit the recipe's model, or the artifact is refused now
    return bundle


def read_bundle(raw: bytes, *, recipe: dict[str, Any] | None = None) -> ModelBundle:
    """The artifact's parts, validated (recipe included) but not built: no factory is called."""
    meta, state = _read_safetensors(raw) if is_safetensors(raw) else _read_torch(raw)
    if "format" not in meta and {"encoder", "classes", "hidden"} <= set(meta):
        meta = _legacy_classifier_meta(meta, state)
    if recipe is not None:
        meta = {**meta, "recipe": recipe}
    for key in ("recipe", "schema", "preprocessing"):
        if key not in meta:
            raise ArtifactError(f"artifact has no {key!r}: not a driftwatch model file")
    schema, preprocessing = meta["schema"], meta["preprocessing"]
    try:
        adapter = _adapter(preprocessing.get("adapter", DEFAULT_ADAPTER), preprocessing["encoder"])
    except ValueError as exc:
        raise ArtifactError(str(exc)) from exc
    bundle = ModelBundle(
        recipe=recipe_from_dict(meta["recipe"], task=schema["task"]),
        schema=schema,
        adapter=adapter,
        target=TargetCodec.from_dict(meta["preprocessing"]["target"]),
        state_dict=state,
    )
    return bundle


@dataclass
class PendingAdapter:
    """An operator's adapter (``module:Class``) as ``read_bundle`` leaves it: its path checked
    against the allowed modules, nothing imported (the web process validates only the structure);
    ``bundle_from_bytes`` restores it."""

    kind: str
    state: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return self.state


def _adapter(kind: str, state: dict[str, Any]) -> Any:
    if ":" in kind:
        check_code_path(kind, field_name="recipe.adapter")  # refused here, before any import
        return PendingAdapter(kind, state)
    return adapter_class(kind).from_dict(state)


def restore_adapter(bundle: ModelBundle) -> None:
    if isinstance(bundle.adapter, PendingAdapter):
        try:
            bundle.adapter = adapter_class(bundle.adapter.kind).from_dict(bundle.adapter.state)
        except ValueError as exc:
            raise ArtifactError(str(exc)) from exc


def _read_safetensors(raw: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    from safetensors.torch import load  # lazy: imports torch

    try:
        state = load(raw)
        (length,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8 : 8 + length])
        meta = json.loads((header.get("__metadata__") or {}).get(METADATA_KEY, "{}"))
    except Exception as exc:
        raise ArtifactError(f"not a readable safetensors file: {exc}") from exc
    return meta, state


def _read_torch(raw: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    import torch  # lazy: see the package docstring

    try:
        data = torch.load(io.BytesIO(raw), weights_only=True, map_location="cpu")
    except Exception as exc:  # weights_only refuses any pickle global outside the allow-list
        raise ArtifactError(f"refused: not a weights-only torch file ({type(exc).__name__})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("state_dict"), dict):
        raise ArtifactError("a torch artifact must be a dict with a 'state_dict'")
    state = data.pop("state_dict")
    if not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ArtifactError("state_dict values must all be tensors")
    return data, state


def _legacy_classifier_meta(data: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """Artifacts written by TabularClassifier.to_bytes (the first demo seeds)."""
    encoder = Encoder.from_dict(data["encoder"])
    classes = list(data["classes"])
    return {
        "recipe": {
            "name": "tabular-classification",
            "hyperparameters": {"hidden": data["hidden"], "layers": 2},
        },
        "schema": {
            "task": "classification",
            "features": {
                **dict.fromkeys(encoder.numerical, "numerical"),
                **dict.fromkeys(encoder.categorical, "categorical"),
            },
            "classes": classes,
            "input_width": encoder.width,
            "output_width": len(classes),
        },
        "preprocessing": {
            "encoder": encoder.to_dict(),
            "target": {"classes": classes, "mean": 0.0, "std": 1.0},
        },
    }


class Predictor:
    """Predictions from a loaded bundle: the same code for champion, challenger and the demo."""

    def __init__(self, bundle: ModelBundle) -> None:
        self.bundle = bundle
        self.module = bundle.build()

    @classmethod
    def from_bytes(cls, raw: bytes, *, recipe: dict[str, Any] | None = None) -> Predictor:
        return cls(bundle_from_bytes(raw, recipe=recipe))

    @property
    def classes(self) -> list[Any] | None:
        return self.bundle.target.classes

    def outputs(self, frame: pd.DataFrame) -> np.ndarray:
        import torch  # lazy: see the package docstring

        self.module.eval()
        with torch.no_grad():
            out = forward(self.module, self.bundle.adapter.inputs(frame))
            if self.classes is not None:
                out = torch.softmax(out, dim=1)
            return out.numpy().astype("float64")

    def predict(self, frame: pd.DataFrame) -> tuple[list[Any], np.ndarray | None]:
        """Predictions, and class probabilities (n × k, class order) for a classifier."""
        outputs = self.outputs(frame)
        proba = outputs if self.classes is not None else None
        return self.bundle.target.decode(outputs), proba
