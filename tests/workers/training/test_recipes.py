import pytest

from workers.training.recipes import TABULAR_CLASSIFICATION, RecipeError, load_factory, recipe_from_dict


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


def test_factory_that_does_not_import_is_refused_with_the_reason() -> None:
    with pytest.raises(RecipeError, match="cannot import 'no_such_module_xyz'"):
        load_factory("no_such_module_xyz:build")


def test_factory_path_needs_module_and_function() -> None:
    with pytest.raises(RecipeError, match="not 'module:function'"):
        load_factory("workers.training.tabular")


def test_factory_attribute_must_exist() -> None:
    with pytest.raises(RecipeError, match="no callable 'nope'"):
        load_factory("workers.training.tabular:nope")
