"""Recipes: how a model version is rebuilt and trained.

A recipe names a factory (``module:function``) that builds the ``torch.nn.Module`` from the model's
schema and the hyperparameters, plus the loss, optimizer,
learning rate, maximum batch size, epochs and early stopping. It is stored as JSON with every
version, so a retrain rebuilds exactly what the champion was.

The factory is a string a client sent (a version upload, an artifact's header), so it is never
imported as given: its module must be a built-in one or exactly one the operator installed and
listed (``allow_recipe_modules``, which the platform calls with DRIFTWATCH_RECIPE_MODULES), and the
function a public one defined in that module. ``check_code_path`` is that rule, and every import
of a factory goes through ``load_factory``, which applies it first.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

LOSSES = {"classification": ("cross_entropy",), "regression": ("mse", "l1", "huber")}
OPTIMIZERS = ("adam", "adamw", "sgd")
SCHEDULES = ("constant", "cosine")  # after ``warmup_steps`` of linear warm-up
TABULAR_FACTORY = "workers.training.tabular:mlp_factory"


# Modules whose factories ship with driftwatch; always allowed.
BUILTIN_MODULES = frozenset(
    {"workers.training.tabular", "workers.training.embeddings", "workers.training.transformer"}
)
MAX_CODE_PATH_CHARS = 300
_operator_modules: frozenset[str] = frozenset()


class RecipeError(ValueError):
    """A recipe that cannot be used: bad field, factory that does not import or build."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


class RecipeNotAllowed(RecipeError):
    """A factory outside the allowed modules: refused before anything is imported."""


def module_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be an allowed module (dotted identifiers, no private or dunder part)."""
    parts = name.split(".")
    if not name or not all(p.isidentifier() and not p.startswith("_") for p in parts):
        return f"{name!r} is not a dotted module name without private or dunder parts"
    return None


def allow_recipe_modules(names: Iterable[str]) -> frozenset[str]:
    """Set the operator's modules (besides the built-ins); returns the previous set."""
    global _operator_modules
    names = frozenset(names)
    problems = [p for p in map(module_name_problem, sorted(names)) if p]
    if problems:
        raise ValueError("; ".join(problems))
    previous, _operator_modules = _operator_modules, names
    return previous


def allowed_recipe_modules() -> frozenset[str]:
    return BUILTIN_MODULES | _operator_modules


def check_code_path(path: Any, *, field_name: str = "recipe.factory") -> tuple[str, str]:
    """``(module, function)`` of an allowed ``module:function``; imports nothing."""
    if not isinstance(path, str) or len(path) > MAX_CODE_PATH_CHARS:
        raise RecipeError(
            field_name, f"must be 'module:function' of at most {MAX_CODE_PATH_CHARS} characters"
        )
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise RecipeError(field_name, f"{path!r} is not 'module:function'")
    if module_name not in allowed_recipe_modules():
        raise RecipeNotAllowed(
            field_name,
            f"module {module_name!r} is not allowed: factories come only from the built-in modules "
            "or a module the operator listed in DRIFTWATCH_RECIPE_MODULES",
        )
    if not attr.isidentifier() or attr.startswith("_"):
        raise RecipeNotAllowed(field_name, f"{attr!r} is not a public function name (no dots, no '_' prefix)")
    return module_name, attr


@dataclass(frozen=True)
class Recipe:
    name: str
    factory: str  # "module:function": factory(schema, hyperparameters) -> torch.nn.Module
    task: str  # "classification" or "regression"
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    loss: str = "cross_entropy"
    optimizer: str = "adam"
    learning_rate: float = 1e-2
    max_batch_size: int = 256
    epochs: int = 30
    early_stopping_patience: int = 5  # epochs without validation improvement; 0 turns it off
    validation_fraction: float = 0.15  # the most recent part of the training rows
    seed: int = 0
    # The input adapter: a registered kind ("tabular", "embedding", "tokenizer") or an allowed
    # "module:Class"; "" picks the one registered for the model's feature types.
    adapter: str = ""
    fine_tune: bool | None = None  # start from the champion's weights; None: yes for deep recipes
    freeze: list[str] = field(default_factory=list)  # parameter-name prefixes left untrained
    schedule: str = "constant"  # learning rate after warm-up: constant or cosine to 0
    warmup_steps: int = 0
    grad_clip: float = 0.0  # max gradient norm; 0 turns it off
    checkpoint_every_steps: int = 0  # besides every epoch; 0: at epoch ends only

    @property
    def is_deep(self) -> bool:
        """Every recipe but the built-in tabular MLP (kilobytes, trained afresh in seconds)."""
        return self.factory != TABULAR_FACTORY

    @property
    def starts_from_champion(self) -> bool:
        """Fine-tune: the recipe's choice, by default for deep recipes."""
        return self.fine_tune if self.fine_tune is not None else self.is_deep

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


TABULAR_CLASSIFICATION = Recipe(
    name="tabular-classification",
    factory=TABULAR_FACTORY,
    task="classification",
    hyperparameters={"hidden": 32, "layers": 2},
    loss="cross_entropy",
)
TABULAR_REGRESSION = Recipe(
    name="tabular-regression",
    factory=TABULAR_FACTORY,
    task="regression",
    hyperparameters={"hidden": 32, "layers": 2},
    loss="mse",
)
EMBEDDING_CLASSIFICATION = Recipe(
    name="embedding-classification",
    factory="workers.training.embeddings:embedding_mlp_factory",
    task="classification",
    hyperparameters={"hidden": 128, "layers": 2},
    adapter="embedding",
    learning_rate=1e-3,
    schedule="cosine",
    warmup_steps=10,
    grad_clip=1.0,
)
EMBEDDING_REGRESSION = replace(
    EMBEDDING_CLASSIFICATION, name="embedding-regression", task="regression", loss="mse"
)
TEXT_CLASSIFICATION = Recipe(
    name="text-classification",
    factory="workers.training.transformer:text_encoder_factory",
    task="classification",
    # d_model, heads, layers, feed-forward width, longest input in tokens, vocabulary size
    hyperparameters={
        "d_model": 64,
        "heads": 4,
        "layers": 2,
        "ff": 128,
        "max_tokens": 128,
        "vocab_size": 8000,
        "dropout": 0.1,
    },  # fmt: skip
    adapter="tokenizer",
    optimizer="adamw",
    learning_rate=5e-4,
    max_batch_size=32,
    epochs=10,
    schedule="cosine",
    warmup_steps=20,
    grad_clip=1.0,
)
BUILTIN = {
    r.name: r
    for r in (
        TABULAR_CLASSIFICATION, TABULAR_REGRESSION, EMBEDDING_CLASSIFICATION, EMBEDDING_REGRESSION,
        TEXT_CLASSIFICATION,
    )
}  # fmt: skip


def builtin_recipe(task: str) -> Recipe:
    """The built-in tabular recipe for a task: any tabular model retrains with no user code."""
    return TABULAR_CLASSIFICATION if task == "classification" else TABULAR_REGRESSION


def load_factory(path: str) -> Callable[..., Any]:
    """Import an allowed ``module:function``; RecipeError says why it cannot be used."""
    return load_code(path, field_name="recipe.factory")


def load_code(path: str, *, field_name: str) -> Callable[..., Any]:
    """Import an allowed ``module:name`` (a factory, an adapter class); RecipeError says why not."""
    module_name, attr = check_code_path(path, field_name=field_name)
    try:
        module = importlib.import_module(module_name)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit too: an import-time failure makes the recipe unusable
        raise RecipeError(field_name, f"cannot import {module_name!r}: {exc!r}") from exc
    # The module's own namespace, not getattr: no module __getattr__, and a name it merely
    # imported from elsewhere (`from os import system`) is not one of its factories.
    code = vars(module).get(attr)
    if not callable(code) or getattr(code, "__module__", None) != module_name:
        raise RecipeError(field_name, f"{module_name!r} defines no callable {attr!r}")
    return code


def recipe_from_dict(data: Any, *, task: str) -> Recipe:
    """Validate a recipe given as JSON: a built-in name, or a full recipe (missing fields default
    to the built-in recipe of the task)."""
    if isinstance(data, str):
        data = {"name": data}
    if not isinstance(data, dict):
        raise RecipeError("recipe", "must be an object or the name of a built-in recipe")
    base = BUILTIN.get(str(data.get("name")), builtin_recipe(task)).to_dict()
    unknown = set(data) - set(base)
    if unknown:
        raise RecipeError(f"recipe.{sorted(unknown)[0]}", "unknown field")
    merged = {**base, **data}
    merged["task"] = task
    _check_fields(merged)
    return Recipe(**merged)


def _check_fields(data: dict[str, Any]) -> None:
    checks: list[tuple[str, bool, str]] = [
        ("name", isinstance(data["name"], str) and bool(data["name"]), "a non-empty string"),
        ("factory", _allowed(data["factory"]), "'module:function'"),
        ("hyperparameters", isinstance(data["hyperparameters"], dict), "an object"),
        ("loss", data["loss"] in LOSSES[data["task"]], f"one of {LOSSES[data['task']]}"),
        ("optimizer", data["optimizer"] in OPTIMIZERS, f"one of {OPTIMIZERS}"),
        ("learning_rate", _positive(data["learning_rate"], float), "a positive number"),
        ("max_batch_size", _positive(data["max_batch_size"], int), "a positive integer"),
        ("epochs", _positive(data["epochs"], int), "a positive integer"),
        ("early_stopping_patience", _natural(data["early_stopping_patience"]), "an integer >= 0"),
        ("validation_fraction", _fraction(data["validation_fraction"]), "a number in [0, 0.5]"),
        ("seed", _natural(data["seed"]), "an integer >= 0"),
        ("adapter", _adapter_ok(data["adapter"]), "a registered adapter kind or 'module:Class'"),
        (
            "fine_tune",
            data["fine_tune"] is None or isinstance(data["fine_tune"], bool),
            "true, false or null",
        ),
        ("freeze", _names(data["freeze"]), "a list of parameter-name prefixes"),
        ("schedule", data["schedule"] in SCHEDULES, f"one of {SCHEDULES}"),
        ("warmup_steps", _natural(data["warmup_steps"]), "an integer >= 0"),
        ("grad_clip", _non_negative(data["grad_clip"]), "a number >= 0"),
        ("checkpoint_every_steps", _natural(data["checkpoint_every_steps"]), "an integer >= 0"),
    ]
    for name, ok, expected in checks:
        if not ok:
            raise RecipeError(f"recipe.{name}", f"must be {expected}")


def _allowed(value: Any) -> bool:
    check_code_path(value)  # raises with the reason when the module is not allowed
    return True


def _adapter_ok(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    if ":" in value:  # an operator's adapter class: the same allow-list as factories
        check_code_path(value, field_name="recipe.adapter")
        return True
    return len(value) <= MAX_CODE_PATH_CHARS and (value == "" or value.replace("-", "_").isidentifier())


def _names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v for v in value) and len(value) <= 100


def _non_negative(value: Any) -> bool:
    return (
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    )


def _positive(value: Any, kind: type) -> bool:
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    return numeric and (kind is float or isinstance(value, int)) and value > 0


def _natural(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _fraction(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 0.5
