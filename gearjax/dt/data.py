"""Offline datasets for decision transformers: episodes, the file formats users
have (D4RL-style HDF5, Minari, plain NPZ), and filling a gearjax table with
return-to-go computed once at insertion.

An :class:`Episodes` holds a list of episodes, each a dict of
``observations [T, obs_dim]``, ``actions [T, act_dim]``, ``rewards [T]`` and
``terminal`` (whether it ended in a terminal state rather than a time limit),
plus ``metadata`` (environment id, per-episode behaviour labels, reference
returns). Every loader returns one and every writer takes one, so converting
between formats is a load and a save.

Formats (all read with h5py or NumPy; nothing is downloaded):

* NPZ (:func:`save_npz`, :func:`load_npz`): flat arrays over all steps,
  ``observations, actions, rewards, terminals, timeouts`` as in D4RL, and a
  ``metadata`` JSON string.
* D4RL HDF5 (:func:`load_d4rl_hdf5`): the same five datasets at the file's
  root (D4RL's ``get_dataset`` layout); metadata in the root's attributes.
* Minari (:func:`load_minari`): a dataset directory (or its
  ``data/main_data.hdf5``) of the HDF5 storage backend, one group
  ``episode_<i>`` per episode with ``observations`` (T + 1 of them: Minari
  stores the final one too), ``actions``, ``rewards``, ``terminations``,
  ``truncations``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

import gearjax as gx

FLAT_KEYS = ("observations", "actions", "rewards", "terminals", "timeouts")


class DatasetError(ValueError):
    """A dataset file that is malformed: missing arrays, mismatched lengths,
    bad shapes or values."""


@dataclasses.dataclass
class Episodes:
    """Episodes of one environment (see the module docstring)."""

    episodes: list[dict[str, Any]]
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if not self.episodes:
            raise DatasetError("a dataset needs at least one episode")
        obs_dim = act_dim = None
        checked = []
        for i, e in enumerate(self.episodes):
            for key in ("observations", "actions", "rewards"):
                if key not in e:
                    raise DatasetError(f"episode {i} has no {key!r}")
            obs = np.asarray(e["observations"], np.float32)
            act = np.asarray(e["actions"], np.float32)
            rew = np.asarray(e["rewards"], np.float32)
            if obs.ndim == 1:
                obs = obs[:, None]
            if act.ndim == 1:
                act = act[:, None]
            if obs.ndim != 2 or act.ndim != 2 or rew.ndim != 1:
                raise DatasetError(f"episode {i}: observations and actions must be [T, dim] and "
                                   f"rewards [T]; got {obs.shape}, {act.shape}, {rew.shape}")
            if not len(obs) == len(act) == len(rew) >= 1:
                raise DatasetError(f"episode {i}: observations, actions and rewards differ in "
                                   f"length ({len(obs)}, {len(act)}, {len(rew)}) or are empty")
            if obs_dim is None:
                obs_dim, act_dim = obs.shape[1], act.shape[1]
            if (obs.shape[1], act.shape[1]) != (obs_dim, act_dim):
                raise DatasetError(f"episode {i}: dims {obs.shape[1]}, {act.shape[1]} differ from "
                                   f"episode 0's {obs_dim}, {act_dim}")
            for name, array in (("observations", obs), ("actions", act), ("rewards", rew)):
                if not np.all(np.isfinite(array)):
                    raise DatasetError(f"episode {i}: {name} hold NaN or infinity")
            checked.append({**e, "observations": obs, "actions": act, "rewards": rew,
                            "terminal": bool(e.get("terminal", False))})
        self.episodes = checked  # the caller's list is left as it was

    def __len__(self) -> int:
        return len(self.episodes)

    @property
    def obs_dim(self) -> int:
        return self.episodes[0]["observations"].shape[1]

    @property
    def act_dim(self) -> int:
        return self.episodes[0]["actions"].shape[1]

    @property
    def num_steps(self) -> int:
        return sum(len(e["rewards"]) for e in self.episodes)

    @property
    def max_length(self) -> int:
        return max(len(e["rewards"]) for e in self.episodes)

    def returns(self) -> np.ndarray:
        """The undiscounted return of each episode."""
        return np.array([float(e["rewards"].sum()) for e in self.episodes])

    def labels(self) -> list[str]:
        """Each episode's behaviour label (``metadata["labels"]``), or ``"?"``."""
        labels = self.metadata.get("labels")
        return list(labels) if labels is not None else ["?"] * len(self)

    def state_stats(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation of observations over all steps (the
        normalisation a decision transformer trains and acts with)."""
        obs = np.concatenate([e["observations"] for e in self.episodes])
        return obs.mean(0), obs.std(0) + 1e-6


# ------------------------------------------------------------------ episodes <-> flat arrays
def split_episodes(flat: dict[str, np.ndarray], metadata: dict | None = None) -> Episodes:
    """Cuts flat D4RL-style arrays into episodes: an episode ends after a step
    whose ``terminals`` or ``timeouts`` flag is set, or at the end of the data."""
    missing = [k for k in ("observations", "actions", "rewards") if k not in flat]
    if missing:
        raise DatasetError(f"missing arrays {missing}; expected {list(FLAT_KEYS)}")
    n = len(flat["rewards"])
    terminals = np.asarray(flat.get("terminals", np.zeros(n)), bool)
    timeouts = np.asarray(flat.get("timeouts", np.zeros(n)), bool)
    for key in FLAT_KEYS:
        if key in flat and len(flat[key]) != n:
            raise DatasetError(f"{key!r} has {len(flat[key])} entries, rewards {n}")
    if n == 0:
        raise DatasetError("the dataset has no steps")
    ends = np.flatnonzero(terminals | timeouts)
    bounds = [0, *(ends + 1).tolist()]
    if bounds[-1] != n:
        bounds.append(n)
    episodes = [{"observations": flat["observations"][a:b], "actions": flat["actions"][a:b],
                 "rewards": flat["rewards"][a:b], "terminal": bool(terminals[b - 1])}
                for a, b in zip(bounds[:-1], bounds[1:])]
    return Episodes(episodes, dict(metadata or {}))


def flatten(data: Episodes) -> dict[str, np.ndarray]:
    """The inverse of :func:`split_episodes`: flat arrays with ``terminals`` set
    on the last step of terminal episodes and ``timeouts`` on the others."""
    terminals, timeouts = [], []
    for e in data.episodes:
        t = np.zeros(len(e["rewards"]), bool)
        end = t.copy()
        end[-1] = True
        terminals.append(end if e["terminal"] else t)
        timeouts.append(t if e["terminal"] else end)
    return {"observations": np.concatenate([e["observations"] for e in data.episodes]),
            "actions": np.concatenate([e["actions"] for e in data.episodes]),
            "rewards": np.concatenate([e["rewards"] for e in data.episodes]),
            "terminals": np.concatenate(terminals), "timeouts": np.concatenate(timeouts)}


# ------------------------------------------------------------------ NPZ
def save_npz(data: Episodes, path: str | os.PathLike) -> None:
    np.savez_compressed(path, **flatten(data), metadata=np.array(json.dumps(data.metadata)))


def load_npz(path: str | os.PathLike) -> Episodes:
    try:
        with np.load(path, allow_pickle=False) as f:
            flat = {k: f[k] for k in f.files}
    except (OSError, ValueError, EOFError) as e:
        raise DatasetError(f"{path} is not a readable NPZ file: {e}") from None
    return split_episodes(flat, _metadata(flat.pop("metadata", None), path))


def _metadata(raw: Any, path: Any) -> dict:
    if raw is None:
        return {}
    try:
        meta = json.loads(str(np.asarray(raw)[()]) if not isinstance(raw, str) else raw)
    except (ValueError, TypeError) as e:
        raise DatasetError(f"{path}: metadata is not valid JSON: {e}") from None
    if not isinstance(meta, dict):
        raise DatasetError(f"{path}: metadata must be a JSON object")
    return meta


# ------------------------------------------------------------------ D4RL HDF5
def save_d4rl_hdf5(data: Episodes, path: str | os.PathLike) -> None:
    import h5py
    with h5py.File(path, "w") as f:
        for key, array in flatten(data).items():
            f.create_dataset(key, data=array, compression="gzip")
        f.attrs["metadata"] = json.dumps(data.metadata)


def load_d4rl_hdf5(path: str | os.PathLike) -> Episodes:
    import h5py
    try:
        with h5py.File(path, "r") as f:
            flat = {k: f[k][()] for k in FLAT_KEYS if k in f and isinstance(f[k], h5py.Dataset)}
            raw_meta = f.attrs.get("metadata")
    except OSError as e:
        raise DatasetError(f"{path} is not a readable HDF5 file: {e}") from None
    return split_episodes(flat, _metadata(raw_meta, path))


# ------------------------------------------------------------------ Minari (HDF5 backend)
def save_minari(data: Episodes, directory: str | os.PathLike) -> Path:
    """Writes a Minari-layout dataset directory (``data/main_data.hdf5`` and
    ``data/metadata.json``); returns the HDF5 file's path. Final observations,
    which our episodes do not keep, are written as copies of the last one."""
    import h5py
    root = Path(directory) / "data"
    root.mkdir(parents=True, exist_ok=True)
    with h5py.File(root / "main_data.hdf5", "w") as f:
        for i, e in enumerate(data.episodes):
            g = f.create_group(f"episode_{i}")
            g.attrs["id"] = i
            g.attrs["total_steps"] = len(e["rewards"])
            g.create_dataset("observations",
                             data=np.concatenate([e["observations"], e["observations"][-1:]]))
            g.create_dataset("actions", data=e["actions"])
            g.create_dataset("rewards", data=e["rewards"])
            end = np.zeros(len(e["rewards"]), bool)
            end[-1] = True
            g.create_dataset("terminations", data=end & e["terminal"])
            g.create_dataset("truncations", data=end & (not e["terminal"]))
    (root / "metadata.json").write_text(json.dumps(
        {"total_episodes": len(data), "total_steps": data.num_steps, **data.metadata}))
    return root / "main_data.hdf5"


def load_minari(path: str | os.PathLike) -> Episodes:
    import h5py
    path = Path(path)
    file = path / "data" / "main_data.hdf5" if path.is_dir() else path
    if not file.exists():
        raise DatasetError(f"no Minari data at {path} (expected {file})")
    metadata = {}
    meta_file = file.parent / "metadata.json"
    if meta_file.exists():
        metadata = _metadata(meta_file.read_text(), meta_file)
    try:
        with h5py.File(file, "r") as f:
            names = sorted((n for n in f if n.startswith("episode_")),
                           key=lambda n: int(n.split("_", 1)[1]))
            if not names:
                raise DatasetError(f"{file} holds no episode_<i> groups")
            episodes = []
            for name in names:
                g = f[name]
                missing = [k for k in ("observations", "actions", "rewards", "terminations")
                           if k not in g]
                if missing:
                    raise DatasetError(f"{file}: {name} lacks {missing}")
                obs, rewards = g["observations"][()], g["rewards"][()]
                if len(obs) != len(rewards) + 1:
                    raise DatasetError(f"{file}: {name} has {len(obs)} observations for "
                                       f"{len(rewards)} steps; Minari stores steps + 1")
                episodes.append({"observations": obs[:-1], "actions": g["actions"][()],
                                 "rewards": rewards, "terminal": bool(g["terminations"][-1])})
    except DatasetError:
        raise
    except (OSError, KeyError, ValueError) as e:
        raise DatasetError(f"{file} is not a readable Minari HDF5 file: {e}") from None
    return Episodes(episodes, metadata)


def load(path: str | os.PathLike) -> Episodes:
    """Loads any of the three formats, chosen by the path: a directory is
    Minari, ``.npz`` is NPZ, ``.hdf5``/``.h5`` is D4RL HDF5 (or Minari's
    ``main_data.hdf5``)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(path)
    if path.is_dir() or path.name == "main_data.hdf5":
        return load_minari(path)
    if path.suffix == ".npz":
        return load_npz(path)
    if path.suffix in (".hdf5", ".h5"):
        return load_d4rl_hdf5(path)
    raise DatasetError(f"{path}: unknown dataset format (use .npz, .hdf5 or a Minari directory)")


def save(data: Episodes, path: str | os.PathLike, fmt: str | None = None) -> Path:
    """Writes ``data`` as ``fmt`` (``"npz"``, ``"hdf5"`` or ``"minari"``; by
    default from the path's suffix, a suffix-less path being Minari)."""
    path = Path(path)
    fmt = fmt or {".npz": "npz", ".hdf5": "hdf5", ".h5": "hdf5"}.get(path.suffix, "minari")
    if fmt == "npz":
        save_npz(data, path)
    elif fmt == "hdf5":
        save_d4rl_hdf5(data, path)
    elif fmt == "minari":
        save_minari(data, path)
    else:
        raise ValueError(f"fmt must be 'npz', 'hdf5' or 'minari', got {fmt!r}")
    return path


# ------------------------------------------------------------------ into a table
def return_to_go(rewards: np.ndarray) -> np.ndarray:
    """R_t = sum of rewards from step t to the end (undiscounted, as the
    decision transformer conditions on)."""
    return np.cumsum(np.asarray(rewards, np.float64)[::-1])[::-1].astype(np.float32)


def table_columns(obs_dim: int, act_dim: int) -> dict[str, gx.Column]:
    """The columns a decision-transformer table holds."""
    return {"observation": gx.Column((obs_dim,), "float32"),
            "action": gx.Column((act_dim,), "float32"),
            "reward": gx.Column((), "float32"),
            "rtg": gx.Column((), "float32")}


def episode_to_trajectory(episode: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"observation": episode["observations"], "action": episode["actions"],
            "reward": episode["rewards"], "rtg": return_to_go(episode["rewards"])}


def make_table(data: Episodes, capacity: int | None = None, max_length: int | None = None,
               **table_kwargs) -> gx.Table:
    """A table holding every episode of ``data`` (capacity defaults to their
    number, max_length to the longest), with return-to-go computed once here.
    Episodes longer than ``max_length`` are refused (cut them first)."""
    max_length = max_length or data.max_length
    if data.max_length > max_length:
        raise ValueError(f"the longest episode has {data.max_length} steps > max_length "
                         f"{max_length}")
    table = gx.Table(table_columns(data.obs_dim, data.act_dim), capacity=capacity or len(data),
                     max_length=max_length, **table_kwargs)
    table.insert_many([episode_to_trajectory(e) for e in data.episodes])
    return table

