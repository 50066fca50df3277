import numpy as np

from workers.training.gate import gate, mcnemar_exact, paired_bootstrap


def test_mcnemar_p_value_is_the_exact_binomial_tail() -> None:
    champion = np.array([False] * 10 + [True] * 5)
    challenger = np.array([True] * 10 + [True] * 5)
    p, b, c = mcnemar_exact(champion, challenger)
    assert (b, c) == (0, 10)
    assert abs(p - 0.5**10) < 1e-12


def test_mcnemar_without_discordant_pairs_is_not_significant() -> None:
    same = np.array([True, False, True])
    assert mcnemar_exact(same, same)[0] == 1.0


def test_better_challenger_passes_the_classification_gate() -> None:
    labels = ["a"] * 200
    champion = ["a"] * 150 + ["b"] * 50
    challenger = ["a"] * 190 + ["b"] * 10
    result = gate(task="classification", labels=labels, challenger=challenger, champion=champion,
                  min_improvement=0.01, alpha=0.05)  # fmt: skip
    assert result.passed and abs(result.improvement - 0.2) < 1e-12


def test_improvement_below_the_minimum_fails_even_when_significant() -> None:
    labels = ["a"] * 1000
    champion = ["a"] * 900 + ["b"] * 100
    challenger = ["a"] * 930 + ["b"] * 70
    result = gate(task="classification", labels=labels, challenger=challenger, champion=champion,
                  min_improvement=0.05, alpha=0.05)  # fmt: skip
    assert result.p_value is not None and result.p_value < 0.05
    assert not result.passed and "below the minimum" in result.reason


def test_small_insignificant_gain_fails_on_alpha() -> None:
    labels = ["a"] * 20
    champion = ["a"] * 18 + ["b"] * 2
    challenger = ["a"] * 19 + ["b"]
    result = gate(task="classification", labels=labels, challenger=challenger, champion=champion,
                  min_improvement=0.0, alpha=0.05)  # fmt: skip
    assert not result.passed and "not significant" in result.reason


def test_no_champion_lets_the_challenger_pass() -> None:
    result = gate(task="classification", labels=["a"], challenger=["a"], champion=None,
                  min_improvement=0.5, alpha=0.01)  # fmt: skip
    assert result.passed and result.champion is None


def test_paired_bootstrap_separates_clearly_better_errors() -> None:
    rng = np.random.default_rng(1)
    champion = rng.normal(scale=2.0, size=300)
    assert paired_bootstrap(champion, champion * 0.5) < 0.01
    assert paired_bootstrap(champion, champion) > 0.5


def test_regression_gate_uses_relative_mae_reduction() -> None:
    truth = np.zeros(400)
    rng = np.random.default_rng(2)
    champion = rng.normal(scale=1.0, size=400)
    result = gate(task="regression", labels=truth, challenger=champion * 0.8, champion=champion,
                  min_improvement=0.1, alpha=0.05)  # fmt: skip
    assert result.test == "paired_bootstrap_abs_error"
    assert abs(result.improvement - 0.2) < 1e-9 and result.passed
