"""A small Ray Tune sweep of decision-transformer training: ASHA over the
learning rate and the model size, on the built-in dataset.

    python scripts/tune_dt.py                       # 4 trials, a few minutes on 2 cores
    python scripts/tune_dt.py --samples 8 --steps 600 --out benchmarks/results/tune_dt_cpu.json

Each trial is :func:`gearjax.dt.tune.trainable` (one ``gearjax.dt.run`` run,
reporting each learning-curve point); ASHA stops the weaker half of the
trials at each rung of evaluations. Writes every trial's configuration, its
last report and how many evaluations it ran, and the best trial, as JSON.
Needs the ``tune`` extra (``pip install 'gearjax[tune]'``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--episodes", type=int, default=2)
    parser.add_argument("--eval-max-steps", type=int, default=200)
    parser.add_argument("--cpus-per-trial", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results/tune_dt_cpu.json")
    args = parser.parse_args(argv)

    import jax
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    from gearjax.dt.tune import trainable

    start = time.perf_counter()
    storage = tempfile.mkdtemp(prefix="gearjax-tune-")
    ray.init(include_dashboard=False, configure_logging=False, log_to_driver=False)
    rungs = max(1, args.steps // args.eval_every)
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": args.cpus_per_trial}),
        param_space={
            "learning_rate": tune.loguniform(3e-4, 3e-3),
            "size": tune.choice(["tiny", "reference"]),
            "seed": args.seed,
            "base": {"steps": args.steps, "eval_every": args.eval_every,
                     "steps_per_call": min(50, args.eval_every),
                     "episodes": args.episodes, "eval_max_steps": args.eval_max_steps},
        },
        tune_config=tune.TuneConfig(
            metric="eval_score", mode="max", num_samples=args.samples,
            scheduler=ASHAScheduler(max_t=rungs, grace_period=1, reduction_factor=2)),
        run_config=tune.RunConfig(storage_path=storage, name="tune_dt", verbose=0))
    results = tuner.fit()
    ray.shutdown()
    if results.errors:
        raise RuntimeError(f"{len(results.errors)} trials failed: {results.errors[0]}")
    trials = []
    for result in results:
        trials.append({"config": {k: v for k, v in result.config.items() if k != "base"},
                       "last": {k: result.metrics[k] for k in ("step", "loss", "eval_mean",
                                                               "eval_score")},
                       "evaluations": int(result.metrics["training_iteration"])})
    best = results.get_best_result()
    summary = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "python": platform.python_version(), "jax": jax.__version__,
                    "devices": [f"{d.platform}:{d.device_kind}" for d in jax.devices()]},
        "config": vars(args), "trials": trials,
        "best": {"config": {k: v for k, v in best.config.items() if k != "base"},
                 "eval_score": best.metrics["eval_score"]},
        "wall_seconds": time.perf_counter() - start,
    }
    for t in trials:
        print(f"lr {t['config']['learning_rate']:.2e}  size {t['config']['size']:9s}  "
              f"evaluations {t['evaluations']}  score {t['last']['eval_score']:.3f}")
    print(f"best: {summary['best']}  ({summary['wall_seconds']:.0f} s)")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=1)
    return summary


if __name__ == "__main__":
    main()
