"""Training a decision transformer from a gearjax table, entirely under jax.jit.

One training step samples its own batch inside the compiled program
(``state, batch = table.sample(state, key, B, K, gx.Timestep(), pad="left")``:
trajectories in proportion to their length, a uniformly random start, windows
left-padded), normalises states, scales returns-to-go, computes the loss and
applies an optax update. :meth:`Learner.train` runs ``steps_per_call`` steps
per dispatch in a ``lax.scan``, so Python is out of the loop; the table state
rides in the scan's carry and from one dispatch to the next (the taught,
fast-dispatch form of the effect contract; docs: "Semantics in jit").

Data parallel: the step runs under ``shard_map`` over a one-axis mesh of the
learner's devices (all local devices by default). Each device samples its
own ``batch_size / devices`` rows with its own key (one sample call per
device), computes gradients, and the gradients are averaged across devices
before one replicated optimizer update. With one device (a CPU) it is the
plain single-device step.

Losses: mean squared action error over real steps (deterministic head), or
Online DT's negative log-likelihood with a learned entropy temperature
(stochastic head, target entropy -act_dim).

Checkpoints are orbax's (a ``CheckpointManager`` step per save):
:meth:`Learner.save` writes the model, optimizer state and step count, and
the replay table with them if given (gearjax/dt/orbax_table.py);
:meth:`Learner.restore` resumes exactly.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import gearjax as gx
from gearjax.dt.model import DecisionTransformer, DTConfig, squashed_gaussian_log_prob


@dataclasses.dataclass(frozen=True)
class Normalizer:
    """How raw table data becomes model input: states are standardised with
    the dataset's mean and std, returns-to-go divided by ``rtg_scale``."""

    state_mean: np.ndarray
    state_std: np.ndarray
    rtg_scale: float

    def states(self, x):
        return (x - self.state_mean) / self.state_std

    def returns(self, r):
        return r / self.rtg_scale


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings (defaults follow the reference implementation,
    with a shorter warm-up for short runs)."""

    batch_size: int = 64
    learning_rate: float = 1e-4
    warmup_steps: int = 500
    weight_decay: float = 1e-4
    grad_clip: float = 0.25
    steps_per_call: int = 50   # steps per lax.scan dispatch
    seed: int = 0

    def __post_init__(self):
        for name in ("batch_size", "steps_per_call"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.warmup_steps < 0 or not self.learning_rate > 0:
            raise ValueError("warmup_steps must be >= 0 and learning_rate > 0")


# A sampler: (table state, key) -> (the state's successor, one device's batch).
Sampler = Callable[[jax.Array, jax.Array], tuple[jax.Array, gx.Batch]]


def sample_window(table: gx.Table, state: jax.Array, key: jax.Array, batch_size: int,
                  context: int) -> tuple[jax.Array, gx.Batch]:
    """The training batch: windows of ``context`` steps, left-padded."""
    return table.sample(state, key, batch_size, context, gx.Timestep(), pad="left")


def loss_fn(model: DecisionTransformer, batch: gx.Batch, normalizer: Normalizer,
            key: jax.Array) -> tuple[jax.Array, dict]:
    """The loss of one batch and its metrics."""
    drop_key, noise_key = jax.random.split(key)
    c = model.config
    mask = batch.mask
    states = normalizer.states(batch["observation"])
    rtg = normalizer.returns(batch["rtg"])
    actions = batch["action"]
    weight = mask.astype(jnp.float32)
    real = jnp.maximum(weight.sum(), 1.0)
    out = model(rtg, states, actions, batch.timestep, mask, rngs=nnx.Rngs(dropout=drop_key))
    if not c.stochastic:
        error = jnp.mean((out - actions) ** 2, axis=-1)
        loss = jnp.sum(error * weight) / real
        return loss, {"loss": loss, "action_mse": loss}
    mean, log_std = out
    log_prob = squashed_gaussian_log_prob(mean, log_std, actions, c.action_scale)
    nll = -jnp.sum(log_prob * weight) / real
    sample = jnp.tanh(mean + jnp.exp(log_std) * jax.random.normal(noise_key, mean.shape))
    entropy = -jnp.sum(squashed_gaussian_log_prob(mean, log_std, sample * c.action_scale,
                                                  c.action_scale) * weight) / real
    temperature = jnp.exp(model.log_temperature[...])
    target = -float(c.act_dim)
    loss = (nll - jax.lax.stop_gradient(temperature) * entropy
            + temperature * jax.lax.stop_gradient(entropy - target))
    return loss, {"loss": loss, "nll": nll, "entropy": entropy, "temperature": temperature}


def make_optimizer(model: DecisionTransformer, config: TrainConfig) -> nnx.Optimizer:
    schedule = optax.linear_schedule(config.learning_rate / max(config.warmup_steps, 1),
                                     config.learning_rate, max(config.warmup_steps, 1))
    tx = optax.chain(optax.clip_by_global_norm(config.grad_clip),
                     optax.adamw(schedule, weight_decay=config.weight_decay))
    return nnx.Optimizer(model, tx, wrt=nnx.Param)


class Learner:
    """A model, its optimizer and the compiled multi-step training function.

    ``sampler(state, key) -> (state, gx.Batch)`` draws one device's batch
    inside the traced step, passing the table state on; by default it samples
    ``table`` (see :func:`sample_window`), with ``batch_size / len(devices)``
    rows. Tests and benchmarks pass other samplers (a fixed device batch, say)
    to compare. ``devices`` defaults to all local devices; ``batch_size`` must
    be a multiple of their number."""

    def __init__(self, model_config: DTConfig, normalizer: Normalizer,
                 table: gx.Table | None = None, config: TrainConfig = TrainConfig(),
                 sampler: Sampler | None = None,
                 devices: Sequence[jax.Device] | None = None):
        self.devices = list(devices) if devices is not None else jax.local_devices()
        if not self.devices:
            raise ValueError("devices is empty")
        if config.batch_size % len(self.devices):
            raise ValueError(f"batch_size ({config.batch_size}) must be a multiple of the "
                             f"number of devices ({len(self.devices)})")
        per_device = config.batch_size // len(self.devices)
        if sampler is None:
            if table is None:
                raise ValueError("give a table or a sampler")
            sampler = lambda state, key: sample_window(  # noqa: E731
                table, state, key, per_device, model_config.context)
        self.model_config, self.config, self.normalizer = model_config, config, normalizer
        self.mesh = Mesh(np.array(self.devices), ("data",))
        model = DecisionTransformer(model_config, nnx.Rngs(config.seed))
        optimizer = make_optimizer(model, config)
        self._graphdef, state = nnx.split((model, optimizer))
        self._state = jax.device_put(state, NamedSharding(self.mesh, P()))
        # The table state every sample takes and returns (gearjax.state).
        # (a fresh one serves samplers that read no table, too: it is a zero)
        self._table_state = jax.device_put(gx.Table.state(table) if table is not None
                                           else jnp.zeros((), jnp.uint32),
                                           NamedSharding(self.mesh, P()))
        self.step = 0
        self._key = jax.random.key(config.seed + 1)

        def device_step(carry, key, batch=None):
            # One device's share of a step; key is this device's [1] slice;
            # batch (train_on) is this device's rows, else it samples its own.
            state, table_state = carry
            model, optimizer = nnx.merge(self._graphdef, state)
            sample_key, loss_key = jax.random.split(key[0])
            if batch is None:
                table_state, batch = sampler(table_state, sample_key)
            grads, metrics = nnx.grad(loss_fn, has_aux=True)(model, batch, normalizer, loss_key)
            grads, metrics = jax.lax.pmean((grads, metrics), "data")
            optimizer.update(model, grads)
            return (nnx.state((model, optimizer)), table_state), metrics

        # check_vma off: the sample custom call has no varying-axes rule; its
        # outputs are per device by construction (the table state carries no
        # data: every device's is the same zero).
        sampling_step = jax.shard_map(device_step, mesh=self.mesh, in_specs=(P(), P("data")),
                                      out_specs=(P(), P()), check_vma=False)
        given_step = jax.shard_map(device_step, mesh=self.mesh,
                                   in_specs=(P(), P("data"), P("data")),
                                   out_specs=(P(), P()), check_vma=False)

        def run(carry, keys):
            return jax.lax.scan(sampling_step, carry, keys)

        def run_on(carry, keys, batches):
            return jax.lax.scan(lambda c, x: given_step(c, *x), carry, (keys, batches))

        self._run = jax.jit(run, donate_argnums=0)
        self._run_on = jax.jit(run_on, donate_argnums=0)

    @property
    def model(self) -> DecisionTransformer:
        """The current model: a view of the trained state, valid until the
        next :meth:`train` (which donates that state); see :meth:`snapshot`."""
        model, _ = nnx.merge(self._graphdef, self._state)
        return model

    def snapshot(self) -> DecisionTransformer:
        """A copy of the current model that later training leaves alone (what
        actor threads act with while the learner trains on)."""
        graphdef, params = nnx.split(self.model)
        return nnx.merge(graphdef, jax.tree.map(jnp.copy, params))

    def train(self, steps: int | None = None) -> dict[str, np.ndarray]:
        """Runs ``steps`` (default ``steps_per_call``) training steps, a
        multiple of ``steps_per_call`` per dispatch; returns each step's
        metrics."""
        steps = steps or self.config.steps_per_call
        if steps % self.config.steps_per_call:
            raise ValueError(f"steps ({steps}) must be a multiple of steps_per_call "
                             f"({self.config.steps_per_call})")
        metrics = []
        shape = (self.config.steps_per_call, len(self.devices))
        for _ in range(steps // self.config.steps_per_call):
            keys = jax.random.split(jax.random.fold_in(self._key, self.step), shape)
            (self._state, self._table_state), m = self._run((self._state, self._table_state),
                                                            keys)
            self.step += self.config.steps_per_call
            metrics.append(m)
        return {k: np.concatenate([np.asarray(m[k]) for m in metrics]) for k in metrics[0]}

    def train_on(self, batches: gx.Batch) -> dict[str, np.ndarray]:
        """Runs one step per leading entry of ``batches`` (a :class:`gx.Batch`
        whose arrays are ``[steps, batch_size, ...]``) in one dispatch, on
        batches made elsewhere (the NumPy-sampler baseline of the throughput
        benchmark, or your own pipeline); returns each step's metrics."""
        steps = batches.mask.shape[0]
        if batches.mask.shape[1] != self.config.batch_size:
            raise ValueError(f"batches hold {batches.mask.shape[1]} rows per step, the learner "
                             f"trains on batch_size={self.config.batch_size}")
        keys = jax.random.split(jax.random.fold_in(self._key, self.step),
                                (steps, len(self.devices)))
        (self._state, self._table_state), metrics = self._run_on(
            (self._state, self._table_state), keys, batches)
        self.step += steps
        return {k: np.asarray(v) for k, v in metrics.items()}

    # ------------------------------------------------------------------ checkpoints
    def save(self, directory: str | os.PathLike, table: gx.Table | None = None) -> str:
        """Writes an Orbax checkpoint step ``directory/<step>`` holding the
        model, optimizer state and step count (item ``state``) and, if given,
        the replay table (item ``table``, see :mod:`gearjax.dt.orbax_table`),
        replacing a step of that number; returns its path."""
        import orbax.checkpoint as ocp

        from gearjax.dt.orbax_table import TableSave
        directory = os.path.abspath(directory)
        items = {"state": ocp.args.StandardSave({"state": nnx.to_pure_dict(self._state),
                                                  "step": np.array(self.step, np.int64)})}
        if table is not None:
            items["table"] = TableSave(table)
        with ocp.CheckpointManager(directory) as manager:
            if self.step in manager.all_steps():
                manager.delete(self.step)
            manager.save(self.step, args=ocp.args.Composite(**items), force=True)
            manager.wait_until_finished()
        return os.path.join(directory, str(self.step))

    def restore(self, directory: str | os.PathLike) -> bool:
        """Resumes from the latest checkpoint step under ``directory`` (its
        ``state``; a saved table is restored by
        :func:`gearjax.dt.orbax_table.latest_table`); returns whether one was
        found."""
        import orbax.checkpoint as ocp
        directory = os.path.abspath(directory)
        if not os.path.isdir(directory):
            return False
        target = {"state": nnx.to_pure_dict(self._state), "step": np.array(0, np.int64)}
        with ocp.CheckpointManager(directory) as manager:
            step = manager.latest_step()
            if step is None:
                return False
            restored = manager.restore(step, args=ocp.args.Composite(
                state=ocp.args.StandardRestore(target)))["state"]
        nnx.replace_by_pure_dict(self._state, restored["state"])
        self._state = jax.device_put(self._state, NamedSharding(self.mesh, P()))  # replicated
        self.step = int(restored["step"])
        return True
