"""python manage.py estimate_memory --factory module:function --batch-size N [--device cuda|cpu]
[--budget 16GiB]: print a training job's predicted peak memory as a table.

The factory returns ``(model, make_batch)`` or ``(model, make_batch, loss_fn)``; see
``workers.memory.cli``. With ``--budget`` the largest fitting batch is planned as well.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from workers.memory import cli


class Command(BaseCommand):
    help = "Predict the peak memory of training a model (GPU memory estimator)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--factory", required=True, help="module:function returning (model, make_batch[, loss_fn])"
        )
        parser.add_argument("--batch-size", type=int, required=True)
        parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
        parser.add_argument("--budget", default=None, help="memory available, e.g. 16GiB, 512MiB, 8GB")
        parser.add_argument("--optimizer", choices=("sgd", "adam", "adamw"), default="adam")
        parser.add_argument("--amp", choices=("bf16", "fp16"), default=None)
        parser.add_argument("--accumulation-steps", type=int, default=1)
        parser.add_argument("--checkpointing", action="store_true")
        parser.add_argument("--iterations", type=int, default=3)

    def handle(self, *args: Any, **opts: Any) -> None:
        # torch is imported here, not at module import: `manage.py help` stays fast.
        from workers.memory import estimate_training_memory, plan_batch_size

        try:
            factory = cli.load_factory(opts["factory"])
            budget = cli.parse_size(opts["budget"]) if opts["budget"] else None
        except (ValueError, ImportError, AttributeError) as exc:
            raise CommandError(str(exc)) from exc
        estimate = estimate_training_memory(
            factory.model,
            factory.make_batch(opts["batch_size"]),
            loss_fn=factory.loss_fn,
            optimizer=opts["optimizer"],
            amp=opts["amp"],
            device=opts["device"],
            iterations=opts["iterations"],
            accumulation_steps=opts["accumulation_steps"],
            checkpointing=opts["checkpointing"],
        )
        self.stdout.write(
            f"{opts['factory']}  batch {opts['batch_size']}  {opts['device']}  {opts['optimizer']}"
            f"  ({estimate.trace_events} events traced in {estimate.estimate_seconds:.2f} s)"
        )
        self.stdout.write(cli.breakdown_table(estimate, budget))
        if budget is not None:
            plan = plan_batch_size(
                factory.model,
                factory.make_batch,
                budget,
                loss_fn=factory.loss_fn,
                optimizer=opts["optimizer"],
                device=opts["device"],
                precision=opts["amp"] or "fp32",
            )
            self.stdout.write(cli.plan_summary(plan))
