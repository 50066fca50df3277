"""Rewrite a safetensors artifact's driftwatch header, as an attacker uploading a file would."""

import json
import struct
from typing import Any

from workers.training.artifacts import METADATA_KEY


def with_header_factory(raw: bytes, factory: str) -> bytes:
    """The same weights, the header's recipe naming ``factory``."""
    (length,) = struct.unpack("<Q", raw[:8])
    header: dict[str, Any] = json.loads(raw[8 : 8 + length])
    meta = json.loads(header["__metadata__"][METADATA_KEY])
    meta["recipe"]["factory"] = factory
    header["__metadata__"][METADATA_KEY] = json.dumps(meta)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    return struct.pack("<Q", len(encoded)) + encoded + raw[8 + length :]
