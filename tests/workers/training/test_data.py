import pandas as pd
import pytest

from workers.training.data import time_ordered_split


def test_holdout_is_the_newest_rows_in_time_order() -> None:
    frame = pd.DataFrame({"t": [5, 1, 4, 2, 3, 0, 9, 8, 7, 6], "v": range(10)})
    labels = [f"l{t}" for t in frame["t"]]
    split = time_ordered_split(frame, labels, time_column="t", holdout_fraction=0.3)
    assert split.holdout["t"].tolist() == [7, 8, 9]
    assert split.train["t"].tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert split.holdout_labels == ["l7", "l8", "l9"]


def test_holdout_fraction_must_be_a_proper_fraction() -> None:
    with pytest.raises(ValueError):
        time_ordered_split(pd.DataFrame({"t": [1]}), ["a"], time_column="t", holdout_fraction=1.0)
