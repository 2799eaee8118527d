"""The main job (gearjax.dt.run): outputs, resuming, the command line and its
errors. Runs are a few dozen steps with short evaluation episodes."""

import json

import numpy as np
import pytest

pytest.importorskip("gymnasium", reason="gearjax.dt needs the rl extra (gymnasium)")

from gearjax.dt import data as D  # noqa: E402
from gearjax.dt import generate as G  # noqa: E402
from gearjax.dt import run as R  # noqa: E402

QUICK = dict(size="tiny", steps=20, eval_every=10, steps_per_call=10, episodes=2,
             eval_max_steps=15, batch_size=8, context=5)


def test_run_writes_results_plot_and_checkpoints(tmp_path):
    results = R.run(R.RunConfig(out=str(tmp_path), **QUICK), progress=False)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["curve"] == results["curve"]
    # The untrained model first (no loss yet), so the curve shows what training did.
    assert [p["step"] for p in saved["curve"]] == [0, 10, 20]
    assert saved["curve"][0]["loss"] is None
    assert all(np.isfinite(p["loss"]) for p in saved["curve"][1:])
    assert all(p["eval_score"] is not None for p in saved["curve"])
    labels = [label for label, _, _ in G.DEFAULT.parts]
    assert list(saved["final"]) == labels          # one evaluation per behaviour policy
    for label in labels:
        assert saved["final"][label]["target"] == saved["dataset"]["policy_returns"][label]
        assert len(saved["final"][label]["returns"]) == 2
    assert saved["best_target"] == max(saved["dataset"]["policy_returns"].values())
    assert saved["model"]["condition_on_return"] and saved["model"]["action_scale"] == 1.0
    assert (tmp_path / "learning_curve.png").stat().st_size > 10_000
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["10", "20"]


def test_resume_continues_the_curve_and_a_fresh_run_replaces_it_saying_so(tmp_path, capsys):
    """One run directory, three runs (each run compiles its own training step,
    most of a run's time here): the first with progress, a resumed one, a
    fresh one that replaces the first's checkpoints and says so."""
    R.run(R.RunConfig(out=str(tmp_path), **QUICK), progress=True)
    err = capsys.readouterr().err
    assert "generating the dataset" in err and "evaluating the trained model" in err
    assert "replacing" not in err  # nothing to replace yet
    first = json.loads((tmp_path / "results.json").read_text())["curve"]
    resumed = R.run(R.RunConfig(out=str(tmp_path), resume=True, **{**QUICK, "steps": 30}),
                    progress=False)
    assert "replacing" not in capsys.readouterr().err  # resuming replaces nothing
    assert resumed["curve"][:3] == first
    assert [p["step"] for p in resumed["curve"]] == [0, 10, 20, 30]
    fresh = R.run(R.RunConfig(out=str(tmp_path), **QUICK), progress=False)  # --quiet says it too
    err = capsys.readouterr().err
    assert "replacing the previous run's checkpoints" in err and "--resume" in err
    assert [p["step"] for p in fresh["curve"]] == [0, 10, 20]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["10", "20"]


def test_behaviour_cloning_from_a_file_names_its_environment(tmp_path):
    path = D.save(G.generate(G.mixture("pendulum"), scale=0.05), tmp_path / "p.npz")
    results = R.run(R.RunConfig(data=str(path), policy="bc", out=str(tmp_path / "bc"), **QUICK),
                    progress=False)
    assert results["dataset"]["env_id"] == "Pendulum-v1"
    assert not results["model"]["condition_on_return"]
    assert results["model"]["action_scale"] == 2.0


def test_unlabelled_data_is_conditioned_on_its_best_and_median_return(tmp_path):
    data = G.generate(G.mixture("pendulum"), scale=0.05)
    bare = D.Episodes(data.episodes, {})
    assert R.targets_of(bare) == {"best episode": bare.returns().max(),
                                  "median episode": np.median(bare.returns())}
    path = D.save(bare, tmp_path / "bare.npz")
    with pytest.raises(ValueError, match="names no environment"):
        R.run(R.RunConfig(data=str(path), out=str(tmp_path / "x"), **QUICK), progress=False)
    results = R.run(R.RunConfig(data=str(path), env_id="Pendulum-v1", out=str(tmp_path / "y"),
                                **QUICK), progress=False)
    assert set(results["final"]) == {"best episode", "median episode"}
    assert results["final"]["best episode"]["score"] is None   # no reference returns


@pytest.mark.parametrize("change, message", [
    ({"policy": "ppo"}, "policy must be"),
    ({"size": "huge"}, "size must be one of"),
    ({"mixture": "cartpole"}, "mixture must be one of"),
    ({"steps": 0}, "steps must be >= 1"),
    ({"eval_every": 15}, "must be a multiple of steps_per_call"),
    ({"steps": 25}, "divide steps"),
    ({"eval_max_steps": 0}, "eval_max_steps must be >= 1"),
])
def test_bad_configs_are_refused(change, message):
    with pytest.raises(ValueError, match=message):
        R.RunConfig(**{**QUICK, **change})


def test_command_line_prints_where_results_went(tmp_path, capsys):
    args = ["--out", str(tmp_path), "--quiet", "--size", "tiny", "--steps", "10",
            "--eval-every", "10", "--steps-per-call", "10", "--episodes", "1",
            "--eval-max-steps", "5", "--batch-size", "4", "--context", "4"]
    assert R.main(args) == 0
    out = capsys.readouterr().out
    for line in ("results: ", "plot:    ", "model:   "):
        assert line in out
    assert str(tmp_path / "results.json") in out and "normalised score" in out
    with pytest.raises(SystemExit):
        R.main(["--steps", "15", "--eval-every", "10", "--out", str(tmp_path / "bad")])
    assert "divide steps" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_online_fine_tuning_after_offline_training(tmp_path):
    results = R.run(R.RunConfig(out=str(tmp_path), stochastic=True, online_calls=2, actors=2,
                                **QUICK), progress=False)
    online = results["online"]
    assert online["target"] == results["best_target"]
    assert len(online["episodes"]) == 4                 # 2 actors x 2 learner dispatches
    assert all(e["length"] == QUICK["eval_max_steps"] for e in online["episodes"])
    assert [p["step"] for p in results["curve"]] == [0, 10, 20, 40]
    assert results["curve"][-1]["online"]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["10", "20", "40"]
    # The last step holds the replay as Online DT left it (its episodes in),
    # and a resumed run samples that table, not the dataset again.
    from gearjax.dt.orbax_table import latest_table
    saved = latest_table(tmp_path / "checkpoints")
    keys = saved.contents()["key"].tolist()
    assert all(e["key"] in keys for e in online["episodes"])
    resumed = R.run(R.RunConfig(out=str(tmp_path), stochastic=True, resume=True,
                                **{**QUICK, "steps": 50}), progress=False)
    assert [p["step"] for p in resumed["curve"]][-1] == 50
    assert [p["step"] for p in resumed["curve"]][:4] == [0, 10, 20, 40]
    again = latest_table(tmp_path / "checkpoints")
    assert again.contents()["key"].tolist() == keys  # the same replay, saved with step 50


def test_a_tune_trial_config_becomes_a_run_config_and_unknown_fields_are_refused():
    from gearjax.dt.tune import run_config
    config = run_config({"learning_rate": 3e-4, "base": {"steps": 40, "eval_every": 20,
                                                        "steps_per_call": 10,
                                                        "learning_rate": 1.0}}, out="/tmp/x")
    assert config.learning_rate == 3e-4 and config.steps == 40 and config.out == "/tmp/x"
    with pytest.raises(ValueError, match="unknown RunConfig fields \\['lr'\\]"):
        run_config({"lr": 1e-3}, out="/tmp/x")


@pytest.mark.parametrize("module", ["gearjax.dt.run", "gearjax.demo"])
def test_every_option_of_the_commands_says_what_it_does(module, capsys):
    """--help explains every option, and shows its default where it has one."""
    import argparse
    import importlib

    main = importlib.import_module(module).main
    parsers: list[argparse.ArgumentParser] = []
    original = argparse.ArgumentParser.parse_args

    def capture(self, *args, **kwargs):
        parsers.append(self)
        raise SystemExit(0)

    argparse.ArgumentParser.parse_args = capture
    try:
        with pytest.raises(SystemExit):
            main([])
    finally:
        argparse.ArgumentParser.parse_args = original
    (parser,) = parsers
    for action in parser._actions:
        if action.dest == "help":
            continue
        assert action.help, f"{module}: {action.option_strings} has no help text"
    text = parser.format_help()
    assert "(default: None)" not in text
    if module == "gearjax.dt.run":
        assert "(default: 1500)" in text and "(default: tiny)" in text
    else:
        assert "(default: 2000)" in text


def test_the_summary_says_what_its_lines_mean(tmp_path, capsys):
    args = ["--out", str(tmp_path), "--quiet", "--size", "tiny", "--steps", "10",
            "--eval-every", "10", "--steps-per-call", "10", "--episodes", "1",
            "--eval-max-steps", "5", "--batch-size", "4", "--context", "4"]
    assert R.main(args) == 0
    out = capsys.readouterr().out
    assert "0 is a random policy's return, 100 the best behaviour policy's" in out
    assert out.count("<- the result") == 1
    assert "(good): return" in out.split("<- the result")[0].splitlines()[-1]
