"""Offline datasets (gearjax.dt.data and gearjax.dt.generate): every format
round-trips exactly, episodes split where D4RL and Minari say, malformed files
fail with a clear DatasetError, and tables get return-to-go once, at insertion."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from gearjax.dt import data as D
from gearjax.dt import generate as G


def make_episodes(lengths=(5, 1, 7), terminal=(True, False, True), seed=0) -> D.Episodes:
    rng = np.random.default_rng(seed)
    return D.Episodes([{"observations": rng.normal(size=(n, 3)).astype(np.float32),
                        "actions": rng.uniform(-1, 1, size=(n, 2)).astype(np.float32),
                        "rewards": rng.normal(size=n).astype(np.float32), "terminal": t}
                       for n, t in zip(lengths, terminal)],
                      {"env_id": "Test-v0", "labels": ["a", "b", "c"]})


def assert_same(a: D.Episodes, b: D.Episodes) -> None:
    assert len(a) == len(b)
    for x, y in zip(a.episodes, b.episodes):
        for key in ("observations", "actions", "rewards"):
            np.testing.assert_array_equal(x[key], y[key])
        assert x["terminal"] == y["terminal"]


@pytest.mark.parametrize("fmt, name", [("npz", "d.npz"), ("hdf5", "d.hdf5"), ("minari", "dset")])
def test_every_format_round_trips_exactly(tmp_path, fmt, name):
    data = make_episodes()
    path = D.save(data, tmp_path / name)
    loaded = D.load(path)
    assert_same(data, loaded)
    assert loaded.metadata["env_id"] == "Test-v0"
    assert loaded.labels() == ["a", "b", "c"]


def test_minari_loads_from_the_hdf5_file_too(tmp_path):
    data = make_episodes()
    file = D.save_minari(data, tmp_path / "dset")
    assert_same(data, D.load(file))


def test_d4rl_layout_splits_on_terminals_and_timeouts(tmp_path):
    # 10 steps: terminal after step 2, timeout after step 6, and a trailing
    # episode with neither flag (cut off by the end of the data).
    n = 10
    with h5py.File(tmp_path / "d4rl.hdf5", "w") as f:
        f["observations"] = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
        f["actions"] = np.zeros((n, 1), np.float32)
        f["rewards"] = np.arange(n, dtype=np.float32)
        f["terminals"] = np.isin(np.arange(n), [2])
        f["timeouts"] = np.isin(np.arange(n), [6])
    loaded = D.load(tmp_path / "d4rl.hdf5")
    assert [len(e["rewards"]) for e in loaded.episodes] == [3, 4, 3]
    assert [e["terminal"] for e in loaded.episodes] == [True, False, False]
    np.testing.assert_array_equal(loaded.episodes[1]["rewards"], [3, 4, 5, 6])
    assert loaded.metadata == {}


def test_return_to_go_is_the_suffix_sum():
    np.testing.assert_allclose(D.return_to_go(np.array([1.0, -2.0, 4.0])), [3.0, 2.0, 4.0])


def test_make_table_inserts_episodes_with_return_to_go():
    data = make_episodes()
    table = D.make_table(data)
    assert len(table) == 3 and table.max_length == 7
    for key, episode in zip(table.contents()["key"], data.episodes):
        stored = table.get(int(key))
        np.testing.assert_array_equal(stored["observation"], episode["observations"])
        np.testing.assert_array_equal(stored["action"], episode["actions"])
        np.testing.assert_allclose(stored["rtg"], D.return_to_go(episode["rewards"]), rtol=1e-6)
    with pytest.raises(ValueError, match="longest episode has 7 steps > max_length 5"):
        D.make_table(data, max_length=5)


@pytest.mark.parametrize("break_it, message", [
    (lambda f: f.pop("rewards"), "missing arrays"),
    (lambda f: f.update(actions=f["actions"][:-1]), "'actions' has 12 entries, rewards 13"),
    (lambda f: f.update(rewards=np.where(np.arange(13) == 4, np.nan, f["rewards"])), "NaN"),
    (lambda f: f.update(observations=np.zeros((13, 2, 2))), r"must be \[T, dim\]"),
    (lambda f: f.update(metadata=np.array("{not json")), "not valid JSON"),
    (lambda f: [f.update({k: v[:0]}) for k, v in list(f.items()) if k != "metadata"],
     "no steps"),
])
def test_malformed_npz_files_fail_clearly(tmp_path, break_it, message):
    flat = D.flatten(make_episodes())
    flat["metadata"] = np.array(json.dumps({}))
    break_it(flat)
    np.savez(tmp_path / "bad.npz", **flat)
    with pytest.raises(D.DatasetError, match=message):
        D.load(tmp_path / "bad.npz")


def test_unreadable_and_unknown_files_fail_clearly(tmp_path):
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    (tmp_path / "junk.hdf5").write_bytes(b"not hdf5")
    (tmp_path / "data.csv").write_text("1,2,3")
    with pytest.raises(D.DatasetError, match="not a readable NPZ"):
        D.load(tmp_path / "junk.npz")
    with pytest.raises(D.DatasetError, match="not a readable HDF5"):
        D.load(tmp_path / "junk.hdf5")
    with pytest.raises(D.DatasetError, match="unknown dataset format"):
        D.load(tmp_path / "data.csv")
    with pytest.raises(FileNotFoundError):
        D.load(tmp_path / "missing.npz")


def test_malformed_minari_files_fail_clearly(tmp_path):
    file = D.save_minari(make_episodes(), tmp_path / "dset")
    with h5py.File(file, "a") as f:
        del f["episode_1/observations"]
        f["episode_1/observations"] = np.zeros((1, 3), np.float32)  # needs steps + 1 = 2
    with pytest.raises(D.DatasetError, match="episode_1 has 1 observations for 1 steps"):
        D.load(tmp_path / "dset")
    file = D.save_minari(make_episodes(), tmp_path / "dset")
    with h5py.File(file, "a") as f:
        del f["episode_2/rewards"]
    with pytest.raises(D.DatasetError, match=r"episode_2 lacks \['rewards'\]"):
        D.load(tmp_path / "dset")
    empty = tmp_path / "empty" / "data"
    empty.mkdir(parents=True)
    h5py.File(empty / "main_data.hdf5", "w").close()
    with pytest.raises(D.DatasetError, match="no episode_<i> groups"):
        D.load(tmp_path / "empty")
    with pytest.raises(D.DatasetError, match="no Minari data"):
        D.load_minari(tmp_path / "nothing")


def test_episodes_refuse_inconsistent_episodes():
    good = make_episodes().episodes
    with pytest.raises(D.DatasetError, match="at least one episode"):
        D.Episodes([])
    with pytest.raises(D.DatasetError, match="differ from episode 0"):
        D.Episodes([good[0], {**good[1], "actions": np.zeros((1, 5))}])
    with pytest.raises(D.DatasetError, match="differ in length"):
        D.Episodes([{**good[0], "rewards": np.zeros(2)}])


def test_generator_labels_returns_and_references():
    data = G.generate(scale=0.05, seed=3)  # one episode per policy
    labels = [label for label, _, _ in G.DEFAULT.parts]
    assert data.labels() == labels
    returns = data.returns()
    for label, ret in zip(labels, returns):
        assert data.metadata["policy_returns"][label] == pytest.approx(ret)
    ref = data.metadata["reference_returns"]
    assert G.normalized_score(ref["good"], data.metadata) == pytest.approx(100)
    assert G.normalized_score(ref["random"], data.metadata) == pytest.approx(0)
    # MountainCar: the pumping policies reach the flag (terminal), the others
    # run into the 999-step time limit.
    ends = {label: (len(e["rewards"]), e["terminal"]) for label, e in zip(labels, data.episodes)}
    assert ends["random"] == (999, False) and ends["timid"] == (999, False)
    assert ends["good"][1] and ends["noisy"][1] and ends["good"][0] < 999


def test_generator_is_deterministic_and_the_good_policy_is_good():
    a, b = G.generate(scale=0.1, seed=1), G.generate(scale=0.1, seed=1)
    assert_same(a, b)
    returns = a.metadata["policy_returns"]
    assert returns["good"] > returns["noisy"] > 90 > returns["random"] > returns["timid"]


def test_mixtures_by_name():
    assert G.mixture("mountaincar") is G.DEFAULT
    with pytest.raises(ValueError, match="mixture must be one of"):
        G.mixture("cartpole")


def test_pendulum_mixture_orders_its_policies():
    returns = G.generate(G.mixture("pendulum"), scale=0.1, seed=1).metadata["policy_returns"]
    assert returns["good"] > returns["weak"] > returns["random"] > returns["brake"]


def test_generator_command_writes_every_format(tmp_path, capsys):
    for name in ("p.npz", "p.hdf5", "p_minari"):
        G.main(["--out", str(tmp_path / name), "--scale", "0.05", "--mixture", "pendulum"])
        assert len(D.load(tmp_path / name)) == 4
    assert "mean return" in capsys.readouterr().out
