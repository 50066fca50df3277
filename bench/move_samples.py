"""Moving an older install's JSON rows into the columnar store (``samples_to_columnar``), then
migration 0031 dropping their columns, on PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/driftwatch nice -n 10 python bench/move_samples.py \
        [--samples 1000000] [--hours 24] [--batch 10000]

Builds the install in its own database ``<name>_move`` (dropped and made anew each run): the
schema at migration 0030 (the JSON payload columns back), one model of 20 numerical features and
two classes, and ``--samples`` index rows without a part over ``--hours`` hours, their features,
prediction and probabilities as JSON, written by one INSERT … SELECT in PostgreSQL. Then, in this
process: the floor, a COPY of those rows' payload columns out of PostgreSQL as text (what any
move has to read); the command, timed with this process's peak anonymous memory (sampled); its
report; and ``migrate`` to the end (0031's check and drop). Prints each, and the command's time
as a ratio to the floor. Parts go to a temporary media folder, deleted after.
"""

import argparse
import io
import os
import shutil
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path
from urllib.parse import urlparse, urlunparse

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pg import bench_database_url  # noqa: E402
from _proc import with_peak  # noqa: E402

N_FEATURES = 20
MODEL = "move-bench"


def fresh_database(url: str) -> None:
    import psycopg

    parsed = urlparse(url)
    name = parsed.path.lstrip("/")
    with psycopg.connect(urlunparse(parsed._replace(path="/postgres")), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')


def json_rows_insert(model_id: int, n: int, hours: int) -> None:
    """``n`` samples stored as the JSON store kept them: no part, the payload as jsonb."""
    from django.db import connection

    features = ", ".join(f"'x{j}', round(random()::numeric, 6)" for j in range(N_FEATURES))
    with connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO monitoring_predictionsample
                  (model_id, sample_id, timestamp, received_at, features, prediction, probabilities)
                SELECT %s, 's' || g, now() - make_interval(secs => %s * g::float8 / %s), now(),
                       jsonb_build_object({features}), to_jsonb(g % 2),
                       jsonb_build_object('0', 0.25, '1', 0.75)
                FROM generate_series(1, %s) AS g""".replace("% 2", "%% 2"),
            [model_id, hours * 3600, n, n],
        )
        cursor.execute("ANALYZE monitoring_predictionsample")


def payload_floor() -> float:
    """Seconds to COPY the JSON rows' payload columns out of PostgreSQL as text."""
    from django.db import connection

    connection.ensure_connection()
    sql = (
        "COPY (SELECT id, sample_id, timestamp, features, prediction, probabilities "
        "FROM monitoring_predictionsample WHERE part_id IS NULL) TO STDOUT"
    )
    t = time.perf_counter()
    with connection.connection.cursor() as cursor, cursor.copy(sql) as copy:
        for _ in copy:
            pass
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--batch", type=int, default=10_000)
    args = parser.parse_args()
    url = bench_database_url(suffix="_move")
    media = Path(tempfile.mkdtemp(prefix="dw-move.", suffix=".media"))
    os.environ["DRIFTWATCH_MEDIA_ROOT"] = str(media)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "driftwatch.settings")
    fresh_database(url)
    import django

    django.setup()
    from django.core.management import call_command

    from monitoring.models import PredictionSample, SamplePart
    from registry.services import model_register

    try:
        call_command("migrate", verbosity=0)
        call_command("migrate", "monitoring", "0030_sample_payload_nullable", verbosity=0)
        model = model_register(
            data={
                "name": MODEL,
                "task": "classification",
                "classes": [0, 1],
                "features": [{"name": f"x{j}", "type": "numerical"} for j in range(N_FEATURES)],
            }
        )
        t = time.perf_counter()
        json_rows_insert(model.pk, args.samples, args.hours)
        print(f"{args.samples:,} JSON rows over {args.hours} h written in {time.perf_counter() - t:.1f} s")
        floors = [payload_floor() for _ in range(2)]
        floor = min(floors)
        print(f"floor: COPY of their payload out as text {floor:.2f} s (best of {len(floors)})")
        out = io.StringIO()
        with redirect_stdout(out):
            before, peak, seconds, _ = with_peak(
                lambda: call_command("samples_to_columnar", "--batch", str(args.batch), stdout=sys.stdout)
            )
        print(out.getvalue().strip())
        print(
            f"samples_to_columnar: {seconds:.2f} s = {args.samples / seconds:,.0f} samples/s = "
            f"{seconds / floor:.1f}x the floor; peak +{(peak - before) / 2**20:.2f} GiB; "
            f"{SamplePart.objects.count()} parts; "
            f"left without a part: {PredictionSample.objects.filter(part__isnull=True).count()}"
        )
        t = time.perf_counter()
        call_command("migrate", verbosity=0)
        print(f"migrate to the end (0031: checked, columns dropped): {time.perf_counter() - t:.2f} s")
    finally:
        shutil.rmtree(media, ignore_errors=True)


if __name__ == "__main__":
    main()
