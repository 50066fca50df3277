"""One embedding check end to end on PostgreSQL (issue 22): n vs n × 768.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/driftwatch nice -n 10 python bench/embedding_check.py \
        [--sizes 5000,10000,20000] [--dim 768] [--methods mean_perm,model] [--sources columnar]

bench/embedding_drift.py times the drift test on arrays (and the window's JSON parse); this one
times what a worker does for ``POST …/checks``: ``quality_check_run`` on a window of n samples of
one ``dim``-dim embedding feature against an n-row reference, the window read from the database
(the columnar store's Arrow parts; ``--sources`` names others registered: the relational
source's JSON rows went with migration monitoring 0031), the check stored. Per source and n, one
model is registered and its reference uploaded and window ingested through the services
(``reference_upload``, ``predictions_ingest``); then each method's check runs in a fresh child
process (its peak RSS, VmHWM, is the check's alone, not ingestion's). Uses (and empties) its own
database ``<name>_embcheck`` and a temporary media folder.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pg import bench_database_url, django_on  # noqa: E402
from _proc import peak_rss_mib  # noqa: E402

BATCH = 2000  # samples per ingest request
TARGET_SECONDS = 10.0


def _vectors(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.normal(size=(n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype("float32")


def prepare(source: str, n: int, dim: int) -> tuple[int, str, str, float]:
    """Register ``emb-<source>-<n>``, upload its reference and ingest its window: (model id, window
    start, end, ingest seconds)."""
    from django.utils import timezone

    from monitoring.models import MonitoringPolicy, SamplePart
    from monitoring.services import predictions_ingest
    from registry.models import RegisteredModel
    from registry.services import model_register, reference_upload

    name = f"emb-{source}-{n}"
    RegisteredModel.objects.filter(name=name).delete()
    model = model_register(
        data={
            "name": name,
            "task": "regression",
            "features": [{"name": "e", "type": "embedding", "dim": dim}],
        }
    )
    rng = np.random.default_rng(n)
    reference = _vectors(rng, n, dim).tolist()
    reference_upload(
        model=model, rows=[{"features": {"e": v}, "prediction": 0.0, "label": 0.0} for v in reference]
    )
    MonitoringPolicy.objects.update_or_create(model=model, defaults={"min_samples": 100})
    end = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    start = end - timedelta(hours=1)
    spent = 0.0
    for first in range(0, n, BATCH):
        vectors = _vectors(rng, min(BATCH, n - first), dim).tolist()
        body = {
            "samples": [
                {
                    "id": f"s{first + i}",
                    "timestamp": (start + timedelta(seconds=(first + i) * 3600 / n)).isoformat(),
                    "features": {"e": v},
                    "prediction": 0.0,
                }
                for i, v in enumerate(vectors)
            ]
        }
        began = time.perf_counter()
        predictions_ingest(model=model, body=body)
        spent += time.perf_counter() - began
    parts = SamplePart.objects.filter(model=model).count()
    assert parts > 0, f"{source} source, no columnar part"
    return model.pk, start.isoformat(), end.isoformat(), spent


def child(model_id: int, start: str, end: str, method: str) -> dict[str, float]:
    """One check in this (fresh) process: its wall and CPU seconds, and the process's peak RSS."""
    from datetime import datetime

    from monitoring.checks import quality_check_run
    from monitoring.models import MonitoringPolicy, QualityCheck
    from monitoring.window import range_window

    MonitoringPolicy.objects.filter(model_id=model_id).update(embedding_drift_method=method)
    QualityCheck.objects.filter(model_id=model_id).delete()
    window = range_window(datetime.fromisoformat(start), datetime.fromisoformat(end))
    cpu = time.process_time()
    began = time.perf_counter()
    check = quality_check_run(model_id=model_id, window=window)
    wall = time.perf_counter() - began
    assert check is not None and check.state == "done", (check and check.state, check and check.error)
    column = check.drift["columns"]["e"]
    assert column["method"] == method, column
    return {
        "wall": wall,
        "cpu": time.process_time() - cpu,
        "rss_mib": peak_rss_mib(),
        "samples": float(check.n_samples),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="5000,10000,20000")
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--methods", default="mean_perm,model")
    parser.add_argument("--sources", default="columnar")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # model id, start, end, method (JSON)
    args = parser.parse_args()
    if args.child:  # the parent's database (its DATABASE_URL is the bench's already)
        django_on(os.environ["DATABASE_URL"])
        print(json.dumps(child(*json.loads(args.child))))
        return
    url = bench_database_url(suffix="_embcheck")
    media = Path(tempfile.mkdtemp(prefix="dw-embcheck."))
    os.environ["DRIFTWATCH_MEDIA_ROOT"] = str(media)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; media {media}")
    print(
        f"{'source':>10} {'n/side':>7} {'ingest s':>9} {'method':>10} {'check s':>8} {'CPU s':>6} {'peak RSS MiB':>13}"
    )
    largest: dict[str, float] = {}
    for source in args.sources.split(","):
        os.environ["DRIFTWATCH_SAMPLE_SOURCE"] = source
        if "django" not in sys.modules:
            django_on(url)
        from django.conf import settings

        settings.DRIFTWATCH_SAMPLE_SOURCE = source  # settings were read once, at setup
        for n in (int(s) for s in args.sizes.split(",")):
            model_id, start, end, ingest = prepare(source, n, args.dim)
            for method in args.methods.split(","):
                spec = json.dumps([model_id, start, end, method])
                out = subprocess.run(
                    [sys.executable, __file__, "--child", spec],
                    capture_output=True, text=True, env=os.environ | {"DRIFTWATCH_SAMPLE_SOURCE": source},
                )  # fmt: skip
                if out.returncode != 0:
                    print(f"{source:>10} {n:>7} check failed: {out.stderr.strip().splitlines()[-1:]}")
                    continue
                got = json.loads(out.stdout.strip().splitlines()[-1])
                assert int(got["samples"]) == n, got
                if n == 20_000 and method == "mean_perm":
                    largest[source] = got["wall"]
                print(
                    f"{source:>10} {n:>7} {ingest:>9.1f} {method:>10} {got['wall']:>8.2f} {got['cpu']:>6.2f} "
                    f"{got['rss_mib']:>13.0f}"
                )
    for source, wall in largest.items():
        verdict = "MET" if wall <= TARGET_SECONDS else "NOT MET"
        print(
            f"TARGET one 20,000 vs 20,000 x {args.dim} mean_perm check <= {TARGET_SECONDS:.0f} s wall ({source} "
            f"source, end to end): {verdict} ({wall:.2f} s) (load average {os.getloadavg()[0]:.1f})"
        )


if __name__ == "__main__":
    main()
