"""alibi-detect's side of bench/embedding_drift.py: runs in its own venv (never driftwatch's).

    python3.11 -m venv /work/venvs/alibi
    /work/venvs/alibi/bin/pip install torch==2.13.0 && /work/venvs/alibi/bin/pip install alibi-detect==0.13.0
    /work/venvs/alibi/bin/python bench/_alibi_peer.py      # then one request per stdin line

A long-lived peer (alibi-detect and torch take seconds to import): each stdin line is a JSON
request ``{"path": "<cells>.npz", "seed": S, "alpha": A}``, the npz holding ``reference`` and
``current`` as (runs, n, dim) float32. Per run it fits ``MMDDrift`` on the reference with the
pytorch backend and its defaults (Gaussian RBF kernel, bandwidth from the reference's median
distance, 100 permutations) and predicts on the window, torch seeded ``S + run`` (its
permutations are torch's). It answers one JSON line: ``{"drift": [...], "p": [...], "s": secs}``.
"""

import contextlib
import json
import sys
import time
from pathlib import Path

# The script's folder holds bench modules; none may shadow a package the peer imports.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402

REAL_STDOUT = sys.stdout


def answer(request: dict) -> dict:
    import torch
    from alibi_detect.cd import MMDDrift

    with np.load(request["path"]) as cells:
        references, currents = cells["reference"], cells["current"]
    started = time.perf_counter()
    drift, p = [], []
    for run, (reference, current) in enumerate(zip(references, currents, strict=True)):
        torch.manual_seed(int(request["seed"]) + run)
        detector = MMDDrift(reference, backend="pytorch", p_val=float(request["alpha"]), device="cpu")
        result = detector.predict(current)["data"]
        drift.append(bool(result["is_drift"]))
        p.append(float(result["p_val"]))
    return {"drift": drift, "p": p, "s": time.perf_counter() - started}


def main() -> None:
    with contextlib.redirect_stdout(sys.stderr):  # library chatter stays off the answer channel
        import alibi_detect.cd  # noqa: F401  (the import's seconds are paid before the first request)

        for line in sys.stdin:
            if not line.strip():
                continue
            out = answer(json.loads(line))
            REAL_STDOUT.write(json.dumps(out) + "\n")
            REAL_STDOUT.flush()


if __name__ == "__main__":
    main()
