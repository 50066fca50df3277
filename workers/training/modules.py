"""The module protocol: what builds the ``torch.nn.Module`` a recipe trains, fresh or from weights.

``build(schema, initial_state=None)`` returns the module for a schema (task, features, classes,
what the input adapter adds, output width); given ``initial_state`` (the champion's state_dict,
to fine-tune rather than start over) it loads it strictly: every key, every shape; the recipe's
``freeze`` prefixes are then left untrained. The first
implementation calls the recipe's ``module:function`` factory (``recipes.load_factory``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from workers.training.recipes import Recipe, RecipeError, load_factory


class WeightsDoNotFit(ValueError):
    """A state_dict that does not load into the module (missing or extra keys, other shapes)."""


class ModuleFactory(Protocol):
    def build(self, schema: dict[str, Any], *, initial_state: Mapping[str, Any] | None = None) -> Any: ...


@dataclass(frozen=True)
class RecipeFactory:
    """``factory(schema, hyperparameters)`` from the recipe's ``module:function``."""

    recipe: Recipe

    def build(self, schema: dict[str, Any], *, initial_state: Mapping[str, Any] | None = None) -> Any:
        import torch  # lazy: see the package docstring

        recipe = self.recipe
        factory = load_factory(recipe.factory)
        try:
            module = factory(schema, dict(recipe.hyperparameters))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # SystemExit too: a factory never ends the process
            raise RecipeError(
                "recipe.factory", f"{recipe.factory} raised {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(module, torch.nn.Module):
            raise RecipeError("recipe.factory", f"{recipe.factory} did not return a torch.nn.Module")
        if initial_state is not None:
            load_weights(module, initial_state)
        freeze(module, recipe.freeze)
        return module


def module_factory(recipe: Recipe) -> ModuleFactory:
    return RecipeFactory(recipe)


def freeze(module: Any, prefixes: list[str]) -> None:
    """Leave the parameters named ``prefix`` or under ``prefix.`` untrained (no gradient, no
    optimizer state: the planner sizes the frozen model). A prefix naming nothing is an error."""
    names = [name for name, _ in module.named_parameters()]
    for prefix in prefixes:
        if not any(_under(name, prefix) for name in names):
            raise RecipeError("recipe.freeze", f"no parameter is named {prefix!r} or under it")
    for name, parameter in module.named_parameters():
        if any(_under(name, prefix) for prefix in prefixes):
            parameter.requires_grad_(False)


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def load_weights(module: Any, state: Mapping[str, Any]) -> None:
    try:
        module.load_state_dict(state, strict=True)
    except (RuntimeError, KeyError) as exc:
        raise WeightsDoNotFit(str(exc)) from exc
