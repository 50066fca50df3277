import sys
from pathlib import Path

import pytest

from workers.training.recipes import (
    TABULAR_CLASSIFICATION,
    RecipeError,
    RecipeNotAllowed,
    load_factory,
    recipe_from_dict,
)


def test_builtin_recipe_by_name_is_the_tabular_classifier() -> None:
    assert recipe_from_dict("tabular-classification", task="classification") == TABULAR_CLASSIFICATION


def test_partial_recipe_takes_the_builtin_defaults() -> None:
    recipe = recipe_from_dict({"epochs": 7, "hyperparameters": {"hidden": 8}}, task="regression")
    assert (recipe.epochs, recipe.loss, recipe.hyperparameters) == (7, "mse", {"hidden": 8})


def test_unknown_recipe_field_is_named() -> None:
    with pytest.raises(RecipeError) as info:
        recipe_from_dict({"epocs": 3}, task="classification")
    assert info.value.field == "recipe.epocs"


def test_loss_must_suit_the_task() -> None:
    with pytest.raises(RecipeError) as info:
        recipe_from_dict({"loss": "mse"}, task="classification")
    assert info.value.field == "recipe.loss"


def test_factory_that_does_not_import_is_refused_with_the_reason(allow_recipe_modules) -> None:
    allow_recipe_modules("no_such_module_xyz")
    with pytest.raises(RecipeError, match="cannot import 'no_such_module_xyz'"):
        load_factory("no_such_module_xyz:build")


def test_factory_path_needs_module_and_function() -> None:
    with pytest.raises(RecipeError, match="not 'module:function'"):
        load_factory("workers.training.tabular")


def test_factory_attribute_must_exist() -> None:
    with pytest.raises(RecipeError, match="defines no callable 'nope'"):
        load_factory("workers.training.tabular:nope")


REFUSED_FACTORIES = [
    "logging.config:fileConfig",  # eval()s an uploaded .ini's handler arguments
    "os:system",
    "unittest.__main__:main",  # module code at import, then SystemExit
    "builtins:eval",
    "workers.training.tabular.os:system",  # a submodule/attribute of a built-in module
    "workers.training:tabular",
    "var.media.artifacts.concept.v2.r3mod:factory",  # an uploaded file on sys.path
    "/tmp/evil.py:factory",
]


@pytest.mark.parametrize("factory", REFUSED_FACTORIES)
def test_a_factory_outside_the_allowed_modules_is_refused_before_any_import(factory: str) -> None:
    module = factory.partition(":")[0]
    before = module in sys.modules
    with pytest.raises(RecipeNotAllowed, match="DRIFTWATCH_RECIPE_MODULES") as info:
        recipe_from_dict({"factory": factory}, task="classification")
    assert info.value.field == "recipe.factory"
    with pytest.raises(RecipeNotAllowed):
        load_factory(factory)
    assert (module in sys.modules) == before  # nothing was imported to decide


@pytest.mark.parametrize(
    "attr", ["__import__", "_private", "os.system", "mlp_factory.__globals__", "__builtins__"]
)
def test_only_public_names_of_an_allowed_module_are_factories(attr: str) -> None:
    with pytest.raises(RecipeNotAllowed, match="public function name"):
        load_factory(f"workers.training.tabular:{attr}")


def test_a_name_an_allowed_module_imported_from_elsewhere_is_not_a_factory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, allow_recipe_modules
) -> None:
    (tmp_path / "team_recipes_probe.py").write_text(
        "from importlib import import_module\n\ndef build(schema, hp):\n    return None\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    allow_recipe_modules("team_recipes_probe")
    assert load_factory("team_recipes_probe:build").__name__ == "build"
    with pytest.raises(RecipeError, match="defines no callable 'import_module'"):
        load_factory("team_recipes_probe:import_module")


def test_only_the_listed_module_is_allowed_not_its_submodules(allow_recipe_modules) -> None:
    allow_recipe_modules("logging")
    with pytest.raises(RecipeNotAllowed):
        load_factory("logging.config:fileConfig")


def test_a_module_raising_systemexit_at_import_is_a_recipe_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, allow_recipe_modules
) -> None:
    (tmp_path / "exits_on_import_probe.py").write_text("raise SystemExit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    allow_recipe_modules("exits_on_import_probe")
    with pytest.raises(RecipeError, match="cannot import 'exits_on_import_probe'"):
        load_factory("exits_on_import_probe:build")


@pytest.mark.parametrize("name", ["unittest.__main__", "a..b", "team/recipes", "_private.mod", ""])
def test_an_allowed_module_setting_must_be_plain_dotted_names(name: str, allow_recipe_modules) -> None:
    with pytest.raises(ValueError, match="not a dotted module name"):
        allow_recipe_modules(name)
