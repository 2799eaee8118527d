"""The decision-transformer results the docs quote, made by gearjax-train's
`run()` and written to benchmarks/results/:

- dt_vs_bc_mountaincar_cpu.json/.png: the built-in default dataset; DT
  conditioned on the best behaviour return against behaviour cloning of the
  whole dataset, same data, network and budget, three seeds each.
- dt_halfcheetah_cpu.json/.png: HalfCheetah-v5 (MuJoCo) generated here; the
  learning curve and final returns against the behaviour policies'.
- dt_vs_bc_pendulum_cpu.json: the same comparison on Pendulum-v1, where
  returns depend strongly on the initial state (one seed).
- online_dt_mountaincar_cpu.json: Online DT. The default mixture without its
  good policy (best behaviour: noisy, about 94); a stochastic DT pre-trained
  offline, then fine-tuned online with two actor threads, against the same
  model trained offline only for the same number of learner steps.

    python scripts/dt_results.py                 # all (about 30 minutes on 2 CPU cores)
    python scripts/dt_results.py --only mountaincar
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path

import numpy as np

from gearjax.dt.run import RunConfig, run

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"


def compare(mixture: str, seeds: list[int], **settings) -> dict:
    """DT and BC runs over ``seeds``; the summary is each policy's final
    normalised score at the best target (mean and per seed)."""
    runs: dict[str, list[dict]] = {"dt": [], "bc": []}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for policy in runs:
                config = RunConfig(mixture=mixture, policy=policy, seed=seed,
                                   out=f"{tmp}/{policy}{seed}", **settings)
                result = run(config, progress=False)
                runs[policy].append(result)
                best = max(result["final"].values(), key=lambda v: v["target"])
                print(f"{mixture} {policy} seed {seed}: return {best['mean']:.1f} "
                      f"score {best['score']:.1f} ({result['wall_seconds']:.0f} s)", flush=True)
    summary = {}
    for policy, results in runs.items():
        finals = [max(r["final"].values(), key=lambda v: v["target"]) for r in results]
        summary[policy] = {"final_score_mean": float(np.mean([f["score"] for f in finals])),
                           "final_scores": [f["score"] for f in finals],
                           "final_returns": [f["mean"] for f in finals]}
    return {"mixture": mixture, "seeds": seeds, "summary": summary, "runs": runs}


def plot_comparison(report: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for policy, color in (("dt", "tab:blue"), ("bc", "tab:red")):
        for i, r in enumerate(report["runs"][policy]):
            steps = [p["step"] for p in r["curve"]]
            ax.plot(steps, [p["eval_score"] for p in r["curve"]], color=color, alpha=0.7,
                    marker="o", label=policy.upper() if i == 0 else None)
    ax.axhline(100, linestyle="--", color="gray", linewidth=0.8)
    ax.annotate("best behaviour policy", (0, 101), fontsize=8, color="gray")
    ax.axhline(0, linestyle=":", color="gray", linewidth=0.8)
    ax.set(xlabel="training step", ylabel="normalised score (random 0, best 100)",
           title=f"{report['runs']['dt'][0]['dataset']['env_id']}: DT vs BC, "
                 f"{len(report['seeds'])} seeds")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def online(seed: int = 0, offline_steps: int = 1000, calls: int = 30) -> dict:
    """Online DT against offline-only training with the same learner steps."""
    import time

    from gearjax.dt import data as D
    from gearjax.dt import generate as G
    from gearjax.dt.evaluate import evaluate
    from gearjax.dt.model import DTConfig
    from gearjax.dt.online import OnlineConfig, finetune
    from gearjax.dt.train import Learner, Normalizer, TrainConfig
    mixture = G.Mixture(G.MOUNTAINCAR.env_id,
                        tuple(p for p in G.MOUNTAINCAR.parts if p[0] != "good"), good="noisy")
    data = G.generate(mixture, seed=seed)
    normalizer = Normalizer(*data.state_stats(), rtg_scale=100.0)
    model = DTConfig.sized("tiny", obs_dim=data.obs_dim, act_dim=data.act_dim, dropout=0.0,
                           stochastic=True)
    train = TrainConfig(learning_rate=1e-3, warmup_steps=100, steps_per_call=50, seed=seed)
    target = 100.0      # above the best return in the data, as Online DT explores

    def score(learner: Learner) -> dict:
        r = evaluate(learner.model, normalizer, mixture.env_id, [target], 10,
                     seed=10_000 + seed)[target]
        return {"mean": r["mean"], "std": r["std"]}

    report = {"policy_returns": data.metadata["policy_returns"], "target": target,
              "offline_steps": offline_steps, "online_calls": calls,
              "steps_per_call": train.steps_per_call}
    table = D.make_table(data, remover="fifo")
    learner = Learner(model, normalizer, table, train)
    learner.train(offline_steps)
    report["after_offline"] = score(learner)
    start = time.perf_counter()
    result = finetune(learner, table, OnlineConfig(mixture.env_id, target, calls=calls,
                                                   actors=2, seed=seed))
    report["online"] = {"episodes": result.episodes, "online_seconds": time.perf_counter() - start,
                        "learner_steps": learner.step}
    report["after_online"] = score(learner)
    control = Learner(model, normalizer, D.make_table(data), train)
    control.train(learner.step)
    report["offline_only_same_steps"] = score(control)
    for name in ("after_offline", "after_online", "offline_only_same_steps"):
        print(f"online DT {name}: return {report[name]['mean']:.1f}", flush=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("mountaincar", "halfcheetah", "pendulum", "online"))
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.only in (None, "mountaincar"):
        report = compare("mountaincar", [0, 1, 2])   # the gearjax-train defaults
        report["settings"] = dataclasses.asdict(RunConfig())
        (RESULTS / "dt_vs_bc_mountaincar_cpu.json").write_text(json.dumps(report, indent=1))
        plot_comparison(report, RESULTS / "dt_vs_bc_mountaincar_cpu.png")
    if args.only in (None, "halfcheetah"):
        config = RunConfig(mixture="halfcheetah", steps=4000, eval_every=500, dropout=0.1,
                           learning_rate=3e-4, out=tempfile.mkdtemp())
        result = run(config, progress=False)
        (RESULTS / "dt_halfcheetah_cpu.json").write_text(json.dumps(result, indent=1))
        from gearjax.dt.run import plot
        plot(result, RESULTS / "dt_halfcheetah_cpu.png")
        for label, r in result["final"].items():
            print(f"halfcheetah target {r['target']:.0f} ({label}): {r['mean']:.0f}", flush=True)
    if args.only in (None, "pendulum"):
        report = compare("pendulum", [0], steps=2000, eval_every=500)
        (RESULTS / "dt_vs_bc_pendulum_cpu.json").write_text(json.dumps(report, indent=1))
    if args.only in (None, "online"):
        report = online()
        (RESULTS / "online_dt_mountaincar_cpu.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
