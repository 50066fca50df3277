"""What a job trains and is judged on, read by sizing (placement), training (execution) and
promotion alike: the training data of usable windows, the holdout, the recipe and the champion."""

import io
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pandas as pd

from monitoring.models import CheckState, QualityCheck
from monitoring.window import window_load
from registry.models import ModelVersion, ReferenceDataset, RegisteredModel
from registry.reference import LABEL, PREDICTION
from retraining.models import RetrainJob, RetrainPolicy
from workers.drift.result import decisions_read
from workers.training.artifacts import Predictor
from workers.training.data import Split, time_ordered_split
from workers.training.recipes import Recipe, RecipeNotAllowed, builtin_recipe, recipe_from_dict

logger = logging.getLogger(__name__)


class DataError(Exception):
    """Not enough usable labelled data: the job fails and is not retried."""


@dataclass
class TrainingData:
    split: Split
    start: datetime
    end: datetime
    logged_predictions: list[Any]  # what the serving champion predicted for the holdout rows


def training_data(model: RegisteredModel, policy: RetrainPolicy, *, now: datetime) -> TrainingData:
    start = now - timedelta(hours=policy.training_window_hours)
    frame = window_load(model=model, start=start, end=now).frame
    frame = frame[frame[LABEL].notna()]
    frame = _drop_unusable_windows(model, frame, start)
    frame = frame.sort_values("timestamp", kind="stable").tail(policy.max_training_samples)
    if policy.include_reference:
        frame = pd.concat([_reference_rows(model, frame), frame], ignore_index=True)
    if len(frame) < policy.min_training_samples:
        raise DataError(
            f"{len(frame)} usable labelled samples; the policy needs {policy.min_training_samples}"
        )
    frame = frame.reset_index(drop=True)
    split = time_ordered_split(
        frame, frame[LABEL].tolist(), time_column="timestamp", holdout_fraction=policy.holdout_fraction
    )
    return TrainingData(
        split=split,
        start=frame["timestamp"].min().to_pydatetime(),
        end=frame["timestamp"].max().to_pydatetime(),
        logged_predictions=split.holdout[PREDICTION].tolist(),
    )


def _drop_unusable_windows(model: RegisteredModel, frame: pd.DataFrame, start: datetime) -> pd.DataFrame:
    """Rows inside a window whose check said ``usable_for_training: false`` (a broken feed)."""
    checks = QualityCheck.objects.filter(model=model, state=CheckState.DONE, window_end__gt=start)
    keep = pd.Series(True, index=frame.index)
    for check in checks.only("window_start", "window_end", "decisions"):
        if not decisions_read(check.decisions).usable_for_training:
            inside = (frame["timestamp"] >= check.window_start) & (frame["timestamp"] < check.window_end)
            keep &= ~inside
    return frame[keep]


def _reference_rows(model: RegisteredModel, frame: pd.DataFrame) -> pd.DataFrame:
    reference = ReferenceDataset.objects.filter(model=model, is_active=True).first()
    if reference is None:
        return frame.iloc[:0]
    with reference.file.open("rb") as handle:
        rows = pd.read_parquet(handle)
    # Older than every logged sample: the reference never reaches the (newest) holdout.
    oldest = frame["timestamp"].min() if len(frame) else pd.Timestamp.now(tz="UTC")
    rows["timestamp"] = oldest - pd.Timedelta(seconds=1)
    return rows


def champion_predictor(champion: ModelVersion | None) -> Predictor | None:
    if champion is None or not champion.artifact:
        return None
    try:
        with champion.artifact.open("rb") as handle:
            return Predictor.from_bytes(handle.read(), recipe=champion.config.get("recipe"))
    except RecipeNotAllowed:  # a refused factory fails the job with its reason, never silently
        raise
    except Exception:  # an opaque upload: the gate falls back to the champion's logged predictions
        logger.warning("champion v%s does not load as a recipe model", champion.version, exc_info=True)
        return None


def job_recipe(model: RegisteredModel, champion: ModelVersion | None, loaded: Predictor | None) -> Recipe:
    if loaded is not None:
        return loaded.bundle.recipe
    if champion is not None and champion.config.get("recipe"):
        return recipe_from_dict(champion.config["recipe"], task=model.task)
    return builtin_recipe(model.task)


def holdout_frame(job: RetrainJob) -> pd.DataFrame:
    with job.holdout.open("rb") as handle:
        return pd.read_parquet(io.BytesIO(handle.read()))
