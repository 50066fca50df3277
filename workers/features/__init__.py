"""Feature types as a registry: one module per type says everything that type means.

    from workers.features import feature_type, register_feature_type
    feature_type("numerical").clean(3.5)            # validation and cleaning at ingest
    register_feature_type(MyType())                  # a new type: one module, no other change

Built-ins: ``numerical``, ``categorical`` and ``embedding``. An unknown name raises ``UnknownFeatureType``
everywhere (ingest, reference, checks, training), never a silent fallback. No Django imports.
"""

from workers.features.base import MISSING, DriftScore, Encoding, FeatureKind, InvalidValue
from workers.features.registry import (
    ColumnType,
    UnknownFeatureType,
    check_column_types,
    feature_type,
    feature_type_names,
    prediction_type,
    register_feature_type,
    unregister_feature_type,
)

__all__ = [
    "MISSING",
    "ColumnType",
    "DriftScore",
    "Encoding",
    "FeatureKind",
    "InvalidValue",
    "UnknownFeatureType",
    "check_column_types",
    "feature_type",
    "feature_type_names",
    "prediction_type",
    "register_feature_type",
    "unregister_feature_type",
]
