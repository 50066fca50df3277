"""Peak memory of one huge prediction batch: what a refused (or accepted) POST costs the process.

    python bench/ingest_memory.py                     # 1,000,000 samples (about 63 MiB): refused
    python bench/ingest_memory.py --samples 100000    # at DRIFTWATCH_MAX_BATCH_ROWS: accepted
    python bench/ingest_memory.py --root /tmp/main    # the same request against another checkout

The request runs in a fresh child process (Django's test client, the real view, middleware and
database: the embedded SQLite default under a temporary DRIFTWATCH_VAR_DIR, so nothing of the
installation is touched). The child resets its peak RSS (/proc/self/clear_refs) right before the POST, with the body
already in memory, and reports how far the peak rose above the resident size at that moment:
that growth is what the request itself cost.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _proc import status_kib  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024


def write_body(path: Path, samples: int) -> int:
    """A batch of ``samples`` small samples, written in chunks (the bench never holds it as objects)."""
    with path.open("wb") as out:
        out.write(b'{"samples":[')
        for start in range(0, samples, 10_000):
            chunk = ",".join(
                f'{{"id":"s{i}","features":{{"x":{i % 997},"c":"{"abc"[i % 3]}"}},"prediction":"{("no", "yes")[i % 2]}"}}'
                for i in range(start, min(samples, start + 10_000))
            )
            out.write((chunk if start == 0 else "," + chunk).encode())
        out.write(b"]}")
    return path.stat().st_size


def child(root: Path, body_path: Path) -> dict[str, object]:
    sys.path[:0] = [str(root / "platform"), str(root)]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "driftwatch.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from core.services import api_token_create
    from registry.services import model_register

    call_command("migrate", interactive=False, verbosity=0)
    features = [{"name": "x", "type": "numerical"}, {"name": "c", "type": "categorical"}]
    model_register(
        data={"name": "bench", "task": "classification", "features": features, "classes": ["no", "yes"]}
    )
    user, _ = get_user_model().objects.get_or_create(username="bench-memory")
    auth = "Bearer " + api_token_create(user=user, scope="ingest")[1]
    client = Client(HTTP_AUTHORIZATION=auth)
    small = {"samples": [{"id": "warm", "features": {"x": 1.0, "c": "a"}, "prediction": "no"}]}
    client.post("/api/v1/models/bench/predictions", json.dumps(small), content_type="application/json")
    body = body_path.read_bytes()
    Path("/proc/self/clear_refs").write_text("5")  # peak RSS := current RSS
    before = status_kib("VmRSS")
    response = client.post("/api/v1/models/bench/predictions", body, content_type="application/json")
    peak = status_kib("VmHWM")
    answer = response.json()
    return {
        "status": response.status_code,
        "answer": answer.get("errors", answer) if isinstance(answer, dict) else answer,
        "body_mib": round(len(body) / MIB, 1),
        "rss_before_mib": round(before / 1024, 1),
        "peak_mib": round(peak / 1024, 1),
        "growth_mib": round((peak - before) / 1024, 1),
        "growth_per_body": round((peak - before) * 1024 / len(body), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose code serves the request")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.root.resolve(), args.child)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        body = Path(tmp) / "body.json"
        write_body(body, args.samples)
        env = {**os.environ, "DRIFTWATCH_VAR_DIR": str(Path(tmp) / "var")}
        for name in ("DATABASE_URL", "REDIS_URL"):  # a throwaway SQLite file and in-process counters
            env.pop(name, None)
        done = subprocess.run(
            [sys.executable, __file__, "--root", str(args.root), "--child", str(body)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            sys.exit(done.stderr)
        result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"checkout: {args.root}")
    print(f"samples: {args.samples:,}  body: {result['body_mib']} MiB  -> HTTP {result['status']}")
    print(f"answer: {json.dumps(result['answer'])[:200]}")
    print(
        f"RSS before the request: {result['rss_before_mib']} MiB; peak during it: {result['peak_mib']} MiB; "
        f"growth {result['growth_mib']} MiB = {result['growth_per_body']}x the body"
    )


if __name__ == "__main__":
    main()
