"""Peer batch-size finders under a simulated device cap; run by bench/deep_retrain.py in the peers venv.

    /work/venvs/conv-peers/bin/python bench/_deep_peers.py '{"case": ..., "cap": ..., ...}'

Prints one JSON line per finder: trials, OOMs, seconds, chosen batch. The finders are the real
libraries (Lightning's BatchSizeFinder through ``Tuner.scale_batch_size``, power and binsearch;
Accelerate's ``find_executable_batch_size``); each trial is a real training step of the same model
on the same data, and the simulated device (``CapOracle``) raises the out-of-memory error they catch.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from _deep_models import CapOracle, DeepCase, build_optimizer, cases, train_step  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

POOL = 256  # distinct rows; the datasets below repeat them


class _Rows(Dataset):  # type: ignore[type-arg]
    def __init__(self, case: DeepCase, length: int) -> None:
        self.x, self.y = case.make_batch(POOL)
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i % POOL], self.y[i % POOL]


class _Log:
    def __init__(self) -> None:
        self.trials: list[int] = []
        self.ooms = 0


def lightning(case: DeepCase, oracle: CapOracle, mode: str, max_batch: int) -> dict[str, Any]:
    import lightning.pytorch as pl
    from lightning.pytorch.tuner import Tuner

    log = _Log()

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = case.build()
            self.batch_size = 2
            self.automatic_optimization = False

        def train_dataloader(self) -> DataLoader:  # type: ignore[type-arg]
            return DataLoader(_Rows(case, max_batch), batch_size=self.batch_size)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return build_optimizer(self.net, case.optimizer)

        def training_step(self, batch: Any, _index: int) -> None:
            n = int(batch[0].shape[0])
            log.trials.append(n)
            try:
                oracle.check(n)
            except RuntimeError:
                log.ooms += 1
                raise
            opt = self.optimizers()
            opt.zero_grad(set_to_none=True)
            loss = case.loss_fn(self.net(*batch), batch)
            self.manual_backward(loss)
            opt.step()

    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    started = time.perf_counter()
    # max_val: Lightning 2.6 stops doubling at 8192 by default and returns 8192 untried, which
    # the embedding MLP (true maximum 4,885-20,490 rows) never fits; search the planner's range.
    chosen = Tuner(trainer).scale_batch_size(
        Module(), mode=mode, steps_per_trial=1, init_val=2, max_trials=25, max_val=max_batch
    )
    return _result(f"lightning-{mode}", log, time.perf_counter() - started, chosen)


def accelerate(case: DeepCase, oracle: CapOracle, max_batch: int) -> dict[str, Any]:
    from accelerate.utils import find_executable_batch_size

    log = _Log()
    torch.manual_seed(0)
    model = case.build()
    opt = build_optimizer(model, case.optimizer)

    @find_executable_batch_size(starting_batch_size=max_batch)
    def train(batch_size: int) -> int:
        log.trials.append(batch_size)
        try:
            oracle.check(batch_size)
        except RuntimeError:
            log.ooms += 1
            raise
        train_step(model, opt, case.make_batch(batch_size), case.loss_fn)
        return batch_size

    started = time.perf_counter()
    chosen = train()
    return _result("accelerate", log, time.perf_counter() - started, chosen)


def _result(name: str, log: _Log, seconds: float, chosen: Any) -> dict[str, Any]:
    return {"finder": name, "trials": len(log.trials), "ooms": log.ooms, "seconds": seconds, "batch": chosen}


def main() -> None:
    logging.disable(logging.WARNING)
    spec = json.loads(sys.argv[1])
    torch.set_num_threads(spec["threads"])
    case = next(c for c in cases(spec["scale"]) if c.name == spec["case"])
    oracle = CapOracle(case, spec["cap"], spec["fits"], spec["fails"])
    for finder in spec["finders"]:
        if finder == "accelerate":
            result = accelerate(case, oracle, spec["max_batch"])
        else:
            result = lightning(case, oracle, finder.split("-")[1], spec["max_batch"])
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
