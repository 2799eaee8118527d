"""The main job: train a decision transformer (or its behaviour-cloning
baseline) on an offline dataset in a gearjax table, evaluate it in its
environment as it learns, and write the results, a plot and a checkpoint.

Command line (``gearjax-train``; ``bash scripts/demo.sh`` runs it on the
built-in default, :data:`gearjax.dt.generate.DEFAULT`)::

    gearjax-train                        # generate the default data, train, evaluate
    gearjax-train --data d4rl.hdf5 --env Hopper-v5 --steps 20000 --size reference
    gearjax-train --policy bc            # behaviour cloning, same network and budget

From Python, :func:`run` does the same and returns the results dict.

Outputs under ``--out`` (default ``runs/<policy>``): ``results.json`` (config,
dataset summary, learning curve, final returns per target),
``learning_curve.png`` and ``checkpoints/<step>`` (one orbax step holding the
model, optimizer state and the replay table; ``--resume`` continues from the
latest, replay included). ``--online-calls N`` (with ``--stochastic`` for
Online DT's exploring head) fine-tunes online after offline training, actors
inserting into the same table (:mod:`gearjax.dt.online`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from gearjax.dt import data as dt_data
from gearjax.dt import generate
from gearjax.dt.evaluate import evaluate
from gearjax.dt.model import SIZES, DTConfig
from gearjax.dt.online import OnlineConfig, finetune
from gearjax.dt.orbax_table import latest_table
from gearjax.dt.train import Learner, Normalizer, TrainConfig
from gearjax.table import Table


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One training run. The defaults are the quick built-in job: a tiny model
    for 1,500 steps (72-101 s a run on a 2-core CPU, see
    benchmarks/results/dt_vs_bc_mountaincar_cpu.json)."""

    data: str | None = None          # dataset file or Minari directory; None: generate `mixture`
    mixture: str = "mountaincar"     # built-in mixture when `data` is None
    env_id: str | None = None        # evaluation environment; default: the dataset's metadata
    policy: str = "dt"               # "dt" (return-conditioned) or "bc" (behaviour cloning)
    size: str = "tiny"
    context: int = 20
    dropout: float = 0.0
    stochastic: bool = False
    steps: int = 1500
    eval_every: int = 250
    episodes: int = 10               # evaluation episodes per target
    eval_max_steps: int | None = None  # cut evaluation episodes short (quick checks)
    batch_size: int = 64
    learning_rate: float = 1e-3
    warmup_steps: int = 100
    steps_per_call: int = 50
    seed: int = 0
    out: str | None = None           # default runs/<policy>
    resume: bool = False
    online_calls: int = 0            # Online DT after offline training: learner dispatches
    actors: int = 2                  # Online DT actor threads
    online_target: float | None = None  # what actors condition on; default the best target

    def __post_init__(self):
        if self.policy not in ("dt", "bc"):
            raise ValueError(f"policy must be 'dt' or 'bc', got {self.policy!r}")
        if self.size not in SIZES:
            raise ValueError(f"size must be one of {tuple(SIZES)}, got {self.size!r}")
        if self.mixture not in generate.MIXTURE_NAMES:
            raise ValueError(f"mixture must be one of {generate.MIXTURE_NAMES}, "
                             f"got {self.mixture!r}")
        for name in ("steps", "eval_every", "episodes", "steps_per_call", "context", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.online_calls < 0 or self.actors < 1:
            raise ValueError(f"online_calls must be >= 0 and actors >= 1, got "
                             f"{self.online_calls} and {self.actors}")
        if self.eval_max_steps is not None and self.eval_max_steps < 1:
            raise ValueError(f"eval_max_steps must be >= 1, got {self.eval_max_steps}")
        if self.eval_every % self.steps_per_call or self.steps % self.eval_every:
            raise ValueError(f"eval_every ({self.eval_every}) must be a multiple of "
                             f"steps_per_call ({self.steps_per_call}) and divide steps "
                             f"({self.steps})")

    @property
    def out_dir(self) -> Path:
        return Path(self.out or os.path.join("runs", self.policy))


def load_data(config: RunConfig) -> dt_data.Episodes:
    """The dataset: loaded from ``config.data`` or generated."""
    if config.data is not None:
        return dt_data.load(config.data)
    return generate.generate(generate.mixture(config.mixture), seed=config.seed)


def _action_scale(env_id: str) -> float:
    import gymnasium as gym
    env = gym.make(env_id)
    high = np.asarray(env.action_space.high, np.float64)
    env.close()
    if not np.all(np.isfinite(high)) or not np.allclose(high, -env.action_space.low):
        raise ValueError(f"{env_id}: the decision transformer needs a symmetric, bounded action "
                         f"space, got [{env.action_space.low}, {high}]")
    return float(high.max())


def targets_of(data: dt_data.Episodes) -> dict[str, float]:
    """Target returns to condition on: each behaviour policy's mean return
    when the dataset is labelled, else the best and the median episode return."""
    if data.metadata.get("policy_returns"):
        return {label: float(r) for label, r in data.metadata["policy_returns"].items()}
    returns = data.returns()
    return {"best episode": float(returns.max()), "median episode": float(np.median(returns))}


def _score(episode_return: float, metadata: dict) -> float | None:
    if "reference_returns" not in metadata:
        return None
    return float(generate.normalized_score(episode_return, metadata))


def run(config: RunConfig = RunConfig(), progress: bool = True,
        on_evaluation: Callable[[dict], None] | None = None) -> dict:
    """Trains and evaluates as :class:`RunConfig` says; writes and returns the
    results (see the module docstring). ``on_evaluation`` is called with each
    point of the learning curve as it is made (step, loss, evaluation at the
    best target): how a Ray Tune trainable reports (gearjax.dt.tune)."""
    start = time.perf_counter()
    say = _Say(progress)
    say("generating the dataset (a few seconds)" if config.data is None
        else f"loading the dataset {config.data}")
    setup = _Setup.make(config)
    first_step = setup.learner.step
    train_seconds = _train_offline(setup, progress, on_evaluation)
    online = None
    if config.online_calls:
        online, seconds = _train_online(setup)
        train_seconds += seconds

    say(f"evaluating the trained model at each of its {len(setup.targets)} target returns "
        f"({config.episodes} episodes each)")
    final = {label: {"target": target, **setup.evaluate_at(target)}
             for label, target in setup.targets.items()}
    data, learner = setup.data, setup.learner
    results = {
        "config": dataclasses.asdict(config),
        "model": dataclasses.asdict(setup.model_config),
        "dataset": {"episodes": len(data), "steps": data.num_steps, "env_id": setup.env_id,
                    "policy_returns": data.metadata.get("policy_returns"),
                    "reference_returns": data.metadata.get("reference_returns")},
        "curve": setup.curve,
        "final": final,
        "online": online,
        "best_target": setup.best,
        "train_steps_per_second": ((learner.step - first_step) / train_seconds
                                   if train_seconds else None),
        "wall_seconds": time.perf_counter() - start,
        "machine": _machine(),
    }
    (config.out_dir / "results.json").write_text(json.dumps(results, indent=1))
    plot(results, config.out_dir / "learning_curve.png")
    return results


@dataclasses.dataclass
class _Setup:
    """What a run trains and evaluates: its data, model, replay table and
    learner (restored when resuming), and the learning curve so far."""
    config: RunConfig
    data: dt_data.Episodes
    env_id: str
    targets: dict[str, float]
    best: float
    normalizer: Normalizer
    model_config: DTConfig
    checkpoints: Path
    table: Table
    learner: Learner
    curve: list[dict]

    @classmethod
    def make(cls, config: RunConfig) -> _Setup:
        data = load_data(config)
        env_id = config.env_id or data.metadata.get("env_id")
        if not env_id:
            raise ValueError("the dataset names no environment; pass env_id (--env)")
        targets = targets_of(data)
        mean, std = data.state_stats()
        normalizer = Normalizer(mean, std,
                                rtg_scale=max(1.0, float(np.abs(data.returns()).max())))
        model_config = DTConfig.sized(
            config.size, obs_dim=data.obs_dim, act_dim=data.act_dim, context=config.context,
            dropout=config.dropout, max_timestep=max(1000, data.max_length),
            action_scale=_action_scale(env_id), stochastic=config.stochastic,
            condition_on_return=config.policy == "dt")
        checkpoints = _checkpoint_dir(config)
        # Resuming restores the replay too (Online DT changed it), from the same
        # checkpoint step as the model.
        table = (config.resume and latest_table(checkpoints)) or dt_data.make_table(data)
        learner = Learner(model_config, normalizer, table, TrainConfig(
            batch_size=config.batch_size, learning_rate=config.learning_rate,
            warmup_steps=config.warmup_steps, steps_per_call=config.steps_per_call,
            seed=config.seed))
        curve: list[dict] = []
        if config.resume and learner.restore(checkpoints):
            previous = config.out_dir / "results.json"
            if previous.exists():
                curve = [p for p in json.loads(previous.read_text())["curve"]
                         if p["step"] <= learner.step]
        return cls(config, data, env_id, targets, max(targets.values()), normalizer,
                   model_config, checkpoints, table, learner, curve)

    def evaluate_at(self, target: float) -> dict:
        config = self.config
        result = evaluate(self.learner.model, self.normalizer, self.env_id, [target],
                          config.episodes, seed=10_000 + config.seed,
                          max_steps=config.eval_max_steps)[float(target)]
        return {**result, "score": _score(result["mean"], self.data.metadata)}

    def evaluation(self) -> dict:
        """An evaluation at the best target, as curve entries (eval_*)."""
        return {f"eval_{k}": v for k, v in self.evaluate_at(self.best).items() if k != "returns"}

    def curve_point(self, metrics: dict) -> dict:
        """The recent training loss and an evaluation at the best target."""
        return {"step": self.learner.step, "loss": float(np.mean(metrics["loss"][-50:])),
                **self.evaluation()}


def _checkpoint_dir(config: RunConfig) -> Path:
    """The run's checkpoint folder; a fresh run (not --resume) replaces an
    old one's, saying so."""
    config.out_dir.mkdir(parents=True, exist_ok=True)
    checkpoints = config.out_dir / "checkpoints"
    if not config.resume and checkpoints.exists():
        # A fresh run replaces an old one: say so, and how to keep it (--quiet too).
        print(f"gearjax-train: replacing the previous run's checkpoints in {checkpoints} "
              f"(--resume continues that run instead; --out writes elsewhere)",
              file=sys.stderr, flush=True)
        shutil.rmtree(checkpoints, ignore_errors=True)
    return checkpoints


def _train_offline(setup: _Setup, progress: bool,
                   on_evaluation: Callable[[dict], None] | None) -> float:
    """Trains to config.steps from the replay, evaluating and checkpointing
    every eval_every steps (the untrained model first, on a fresh curve);
    returns the seconds spent training."""
    config, learner = setup.config, setup.learner
    bar = _Progress(config.steps, learner.step, enabled=progress)
    train_seconds, first_step = 0.0, learner.step
    with bar:
        if not setup.curve:
            # The untrained model first, so the curve shows what training did.
            bar.note(f"evaluating the untrained model ({config.episodes} episodes)")
            setup.curve.append({"step": learner.step, "loss": None, **setup.evaluation()})
        while learner.step < config.steps:
            tick = time.perf_counter()
            # One fused call at a time, so the bar moves with each.
            calls = []
            for _ in range(config.eval_every // config.steps_per_call):
                if learner.step == first_step:
                    bar.note("compiling the training step (the first call only)")
                calls.append(learner.train(config.steps_per_call))
                bar.step(learner.step, float(np.mean(calls[-1]["loss"])))
            metrics = {k: np.concatenate([m[k] for m in calls]) for k in calls[0]}
            train_seconds += time.perf_counter() - tick
            bar.note(f"evaluating ({config.episodes} episodes)")
            point = setup.curve_point(metrics)
            setup.curve.append(point)
            if on_evaluation is not None:
                on_evaluation(point)
            learner.save(setup.checkpoints, setup.table)
            bar.update(learner.step, point)
    return train_seconds


def _train_online(setup: _Setup) -> tuple[dict, float]:
    """Online fine-tuning (config.online_calls calls): actors roll out, the
    replay takes their episodes, the learner trains on it; returns the
    results' "online" entry and the seconds spent fine-tuning (not the
    evaluation after it)."""
    config = setup.config
    target = setup.best if config.online_target is None else config.online_target
    tick = time.perf_counter()
    result = finetune(setup.learner, setup.table, OnlineConfig(
        setup.env_id, target, calls=config.online_calls, actors=config.actors,
        explore=config.stochastic, max_episode_steps=config.eval_max_steps, seed=config.seed))
    seconds = time.perf_counter() - tick
    setup.curve.append({**setup.curve_point(result.metrics), "online": True})
    setup.learner.save(setup.checkpoints, setup.table)
    return {"target": target, "episodes": result.episodes, "seconds": result.seconds}, seconds


def plot(results: dict, path: str | os.PathLike) -> None:
    """The learning curve (loss; evaluation return against the behaviour
    policies' returns) and the final return against each target."""
    # A bare Figure, not pyplot: no global backend switch (notebooks keep
    # their inline plots) and nothing left open.
    from matplotlib.figure import Figure
    curve = results["curve"]
    steps = [p["step"] for p in curve]
    fig = Figure(figsize=(15, 4))
    ax_loss, ax_return, ax_target = fig.subplots(1, 3)
    trained = [p for p in curve if p["loss"] is not None]  # step 0 has no loss yet
    ax_loss.plot([p["step"] for p in trained], [p["loss"] for p in trained], marker="o")
    ax_loss.set(xlabel="training step", ylabel="training loss", title="loss")
    mean = np.array([p["eval_mean"] for p in curve])
    std = np.array([p["eval_std"] for p in curve])
    ax_return.plot(steps, mean, marker="o", label=results["config"]["policy"].upper())
    ax_return.fill_between(steps, mean - std, mean + std, alpha=0.2)
    policies = sorted((results["dataset"]["policy_returns"] or {}).items(), key=lambda i: i[1])
    for i, (label, value) in enumerate(policies):
        ax_return.axhline(value, linestyle="--", linewidth=0.8, color="gray")
        # Alternately above and below their lines: close returns do not overprint.
        ax_return.annotate(f"{label} policy", (steps[0] if steps else 0, value), fontsize=8,
                           color="gray", xytext=(2, 3 if i % 2 else -9),
                           textcoords="offset points")
    ax_return.set(xlabel="training step", ylabel="return",
                  title=f"evaluation (target {results['best_target']:.1f})")
    ax_return.legend(loc="lower right")
    final = results["final"]
    targets = [v["target"] for v in final.values()]
    achieved = [v["mean"] for v in final.values()]
    ax_target.errorbar(targets, achieved, yerr=[v["std"] for v in final.values()], fmt="o")
    lo, hi = min(targets + achieved), max(targets + achieved)
    ax_target.plot([lo, hi], [lo, hi], linestyle=":", color="gray", label="achieved = target")
    for i, (label, v) in enumerate(sorted(final.items(), key=lambda i: i[1]["target"])):
        ax_target.annotate(label, (v["target"], v["mean"]), fontsize=8,
                           xytext=(4, 4 if i % 2 else -10), textcoords="offset points")
    ax_target.set(xlabel="target return", ylabel="achieved return", title="conditioning")
    ax_target.legend()
    fig.suptitle(f"{results['dataset']['env_id']}: {results['config']['policy'].upper()}, "
                 f"{results['config']['size']} model")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _machine() -> dict:
    import platform

    import jax
    return {"platform": platform.platform(), "processor": platform.processor(),
            "cpus": os.cpu_count(), "jax_backend": jax.default_backend(),
            "devices": [str(d) for d in jax.devices()]}


class _Progress:
    """A rich progress bar over training steps, showing the latest loss and
    evaluation; silent when disabled."""

    def __init__(self, total: int, done: int, enabled: bool):
        self.enabled = enabled
        if enabled:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)
            self.progress = Progress(TextColumn("[bold]training"), BarColumn(),
                                     MofNCompleteColumn(), TimeElapsedColumn(),
                                     TimeRemainingColumn(), TextColumn("{task.fields[note]}"))
            self.task = self.progress.add_task("train", total=total, completed=done, note="")

    def __enter__(self):
        if self.enabled:
            self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        if self.enabled:
            self.progress.__exit__(*exc)

    def note(self, text: str) -> None:
        """What the run is doing now (shown beside the bar)."""
        if self.enabled:
            self.progress.update(self.task, note=text)

    def step(self, step: int, loss: float) -> None:
        """After each fused training call."""
        if self.enabled:
            self.progress.update(self.task, completed=step, note=f"training, loss {loss:.4f}")

    def update(self, step: int, point: dict) -> None:
        """After each evaluation."""
        if not self.enabled:
            return
        score = point.get("eval_score")
        note = f"loss {point['loss']:.4f}  return {point['eval_mean']:.1f}"
        if score is not None:
            note += f"  score {score:.0f}"
        self.progress.update(self.task, completed=step, note=note)


class _Say:
    """One line on stderr about a phase with no progress bar; silent when
    the progress display is off."""

    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __call__(self, text: str) -> None:
        if self.enabled:
            print(f"gearjax-train: {text}", file=sys.stderr, flush=True)


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in --help, unless its text says it (or it has none)."""

    def _get_help_string(self, action):
        if action.default in (None, False) or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def _parser() -> argparse.ArgumentParser:
    """gearjax-train's options, their defaults RunConfig's."""
    defaults = RunConfig()
    parser = argparse.ArgumentParser(
        prog="gearjax-train", description=__doc__.split("\n\n")[0],
        formatter_class=_Help)
    parser.add_argument("--data", help="dataset: .npz, D4RL .hdf5 or a Minari directory "
                        "(default: generate the built-in mixture)")
    parser.add_argument("--mixture", choices=generate.MIXTURE_NAMES, default=defaults.mixture,
                        help="built-in dataset generated when --data is not given: its "
                        "environment and behaviour policies (gearjax.dt.generate)")
    parser.add_argument("--env", dest="env_id", help="evaluation environment (default: the "
                        "dataset's env_id)")
    parser.add_argument("--policy", choices=("dt", "bc"), default=defaults.policy,
                        help="dt: a decision transformer conditioned on a target return; "
                        "bc: the same model without it (behaviour cloning)")
    parser.add_argument("--size", choices=tuple(SIZES), default=defaults.size,
                        help="model size (layers, width, heads: gearjax.dt.model.SIZES)")
    parser.add_argument("--stochastic", action="store_true",
                        help="a Gaussian action head, as Online DT uses")
    helps = {
        "context": "steps of history the model sees (the sampled window)",
        "steps": "training steps in all",
        "eval_every": "training steps between evaluations (a point of the learning curve)",
        "episodes": "evaluation episodes per target return",
        "eval_max_steps": "cut evaluation episodes after this many steps (default: the "
                          "environment's own limit)",
        "batch_size": "windows sampled per training step",
        "warmup_steps": "learning-rate warm-up steps",
        "steps_per_call": "training steps per jitted call (a lax.scan that samples its own "
                          "batches); divides --eval-every",
        "seed": "seed of the dataset, the model and the sampling",
        "dropout": "dropout rate",
        "learning_rate": "peak learning rate (AdamW)",
    }
    for name in ("context", "steps", "eval_every", "episodes", "eval_max_steps", "batch_size",
                 "warmup_steps", "steps_per_call", "seed"):
        parser.add_argument("--" + name.replace("_", "-"), type=int,
                            default=getattr(defaults, name), help=helps[name])
    for name in ("dropout", "learning_rate"):
        parser.add_argument("--" + name.replace("_", "-"), type=float,
                            default=getattr(defaults, name), help=helps[name])
    parser.add_argument("--online-calls", type=int, default=0, help="Online DT fine-tuning "
                        "after offline training: learner dispatches while actors insert "
                        "(0: offline only)")
    parser.add_argument("--actors", type=int, default=defaults.actors,
                        help="Online DT: actor threads stepping the environment")
    parser.add_argument("--online-target", type=float, help="Online DT: the actors' target "
                        "return (default: the best behaviour return)")
    parser.add_argument("--out", help="output directory (default runs/<policy>)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the latest checkpoint in the output directory")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def _report(results: dict, config: RunConfig) -> None:
    """What a finished run prints: the returns per target, and where its
    results, plot and model are."""
    out = config.out_dir
    print(f"\n{results['dataset']['env_id']}, {config.policy.upper()} ({config.size}), "
          f"{config.steps} steps in {results['wall_seconds']:.0f} s")
    print(f"The trained model's mean return over {config.episodes} episodes when told to aim "
          f"at each behaviour policy's return{' (a BC model ignores the target)' if config.policy == 'bc' else ''}:")
    for label, r in results["final"].items():
        score = "" if r["score"] is None else f"  (normalised score {r['score']:.1f})"
        mark = "  <- the result: the best target" if r["target"] == results["best_target"] else ""
        print(f"  target {r['target']:8.1f} ({label}): return {r['mean']:8.1f} "
              f"± {r['std']:.1f}{score}{mark}")
    if any(r["score"] is not None for r in results["final"].values()):
        print("Normalised score: 0 is a random policy's return, 100 the best behaviour "
              "policy's. Lower targets are meant to give lower returns: a return-conditioned "
              "model does what it is asked.")
    print(f"results: {out / 'results.json'}")
    print(f"plot:    {out / 'learning_curve.png'}")
    print(f"model:   {out / 'checkpoints'}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = vars(parser.parse_args(argv))
    quiet = args.pop("quiet")
    try:
        config = RunConfig(**args)
    except ValueError as error:
        parser.error(str(error))
    results = run(config, progress=not quiet)
    _report(results, config)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
