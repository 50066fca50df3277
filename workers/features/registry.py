"""The feature-type registry: one ``FeatureKind`` per type name; an unknown name is an error.

The built-in types (``numerical``, ``categorical``) register themselves from their own modules,
imported on the first lookup (a fixed list of our modules, never a name a client sent), so the
engines that dispatch through the registry can import it without an import cycle.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workers.features.base import FeatureKind

# A feature type's registered name ("numerical", "categorical", ...): the registry is open, so a
# Literal cannot list them; every lookup checks the name instead.
ColumnType = str

# The built-in types and their modules, listed first (in this order) whoever imports them first.
BUILTINS = {
    "numerical": "workers.features.numerical",
    "categorical": "workers.features.categorical",
    "embedding": "workers.features.embedding",
    "text": "workers.features.text",
}
_REGISTRY: dict[str, FeatureKind[Any]] = {}
_builtins_loaded = False


class UnknownFeatureType(ValueError):
    """A type name no module registered."""


def register_feature_type(kind: FeatureKind[Any]) -> FeatureKind[Any]:
    """Add a feature type; a second registration of the same name replaces the first."""
    if not kind.name or not isinstance(kind.name, str):
        raise ValueError(f"a feature type needs a name, got {kind.name!r}")
    _REGISTRY[kind.name] = kind
    return kind


def unregister_feature_type(name: str) -> None:
    """Remove a type (tests that register a toy type clean up after themselves)."""
    _REGISTRY.pop(name, None)


def _load_builtins() -> None:
    global _builtins_loaded
    if not _builtins_loaded:
        _builtins_loaded = True
        for module in BUILTINS.values():
            importlib.import_module(module)


def feature_type(name: str) -> FeatureKind[Any]:
    """The registered type called ``name``; raises ``UnknownFeatureType`` for any other name."""
    _load_builtins()
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownFeatureType(
            f"unknown feature type {name!r} (registered: {feature_type_names()})"
        ) from None


def feature_type_names() -> list[str]:
    """Registered type names: the built-ins first, then the others in registration order."""
    _load_builtins()
    builtins = [name for name in BUILTINS if name in _REGISTRY]
    return builtins + [name for name in _REGISTRY if name not in BUILTINS]


def check_column_types(columns: dict[str, str]) -> None:
    """Raise ``UnknownFeatureType`` naming every column whose type is not registered."""
    names = set(feature_type_names())
    bad = {name: kind for name, kind in columns.items() if kind not in names}
    if bad:
        raise UnknownFeatureType(f"unknown feature types {bad} (registered: {sorted(names)})")


def prediction_type(task: str) -> ColumnType:
    """The type a model's output is tested as: a class label is categorical, a regression's
    number numerical (the one place that says so)."""
    return "categorical" if task == "classification" else "numerical"
