"""Decision-transformer training as a Ray Tune trainable (the ``tune`` extra:
``pip install 'gearjax[tune]'``): each trial is one :func:`gearjax.dt.run.run`
whose learning-curve points are reported to Tune as they are made, so
schedulers such as ASHA can stop weak trials early.

::

    from ray import tune
    from gearjax.dt.tune import trainable

    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        param_space={"learning_rate": tune.loguniform(1e-4, 3e-3),
                     "size": tune.choice(["tiny", "reference"]),
                     "base": {"steps": 500, "eval_every": 100}},
        tune_config=tune.TuneConfig(metric="eval_score", mode="max",
                                    scheduler=tune.schedulers.ASHAScheduler()))
    results = tuner.fit()

A trial's ``config`` holds :class:`gearjax.dt.run.RunConfig` fields, and
``base`` (a dict of more fields, the same for every trial). Each report has
the curve point's ``step``, ``loss``, ``eval_mean``, ``eval_score`` (the
normalised score where the dataset has references, else the mean return) and
``training_iteration``. Trials write their outputs under the trial's own
directory.
"""

from __future__ import annotations

import dataclasses
import os

from gearjax.dt.run import RunConfig, run

FIELDS = {f.name for f in dataclasses.fields(RunConfig)}


def run_config(config: dict, out: str) -> RunConfig:
    """The RunConfig of a trial: ``base`` and the sampled fields (the latter
    win); unknown names raise ValueError."""
    merged = {**dict(config.get("base", {})), **{k: v for k, v in config.items() if k != "base"}}
    unknown = sorted(set(merged) - FIELDS)
    if unknown:
        raise ValueError(f"unknown RunConfig fields {unknown}; known: {sorted(FIELDS)}")
    return RunConfig(**{**merged, "out": out})


def trainable(config: dict) -> None:
    """A Ray Tune function trainable: one run, reporting every curve point."""
    from ray import tune

    def report(point: dict) -> None:
        score = point.get("eval_score")
        tune.report({"step": point["step"], "loss": point["loss"],
                     "eval_mean": point["eval_mean"],
                     "eval_score": point["eval_mean"] if score is None else score})

    out = os.path.join(tune.get_context().get_trial_dir(), "run")
    run(run_config(config, out), progress=False, on_evaluation=report)
