"""The decision transformer (Chen et al., 2021) and its Online DT variant (Zheng
et al., 2022) in Flax NNX.

Each step t of a window of K steps becomes three tokens, in order: the
return-to-go R_t, the state s_t and the action a_t, each embedded by its own
linear layer plus a learned embedding of the step's timestep. A GPT-style
stack with causal attention runs over the 3K tokens; the action at step t is
predicted from the hidden state of token s_t, which sees R_1..R_t, s_1..s_t
and a_1..a_{t-1}. Padded steps (``mask`` False) are never attended to.

Heads: deterministic (tanh, scaled to the action bound; trained with MSE) or
stochastic (a tanh-squashed Gaussian; trained by likelihood with an entropy
bonus, as Online DT does).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from flax import nnx

# (hidden size, layers, heads) by name. "reference" is the original paper's
# configuration for MuJoCo (K = 20, 128-dim, 3 layers, 1 head).
SIZES = {
    "tiny": (64, 2, 1),
    "reference": (128, 3, 1),
    "medium": (256, 6, 4),
    "large": (512, 12, 8),
    "xl": (1024, 24, 16),
}
LOG_STD_RANGE = (-5.0, 2.0)


@dataclasses.dataclass(frozen=True)
class DTConfig:
    """Hyper-parameters of a decision transformer."""

    obs_dim: int
    act_dim: int
    context: int = 20              # K, steps per window
    hidden: int = 128
    layers: int = 3
    heads: int = 1
    dropout: float = 0.1
    max_timestep: int = 1000       # timesteps at or beyond this share the last embedding
    action_scale: float = 1.0      # actions lie in [-action_scale, action_scale]
    stochastic: bool = False       # Online DT's Gaussian head
    condition_on_return: bool = True  # False: behaviour cloning with the same network

    def __post_init__(self):
        for name in ("obs_dim", "act_dim", "context", "hidden", "layers", "heads", "max_timestep"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if not self.action_scale > 0:
            raise ValueError(f"action_scale must be > 0, got {self.action_scale}")

    @classmethod
    def sized(cls, size: str, **kwargs) -> "DTConfig":
        """A config of a named size (see :data:`SIZES`)."""
        if size not in SIZES:
            raise ValueError(f"size must be one of {tuple(SIZES)}, got {size!r}")
        hidden, layers, heads = SIZES[size]
        return cls(hidden=hidden, layers=layers, heads=heads, **kwargs)


class Block(nnx.Module):
    """Pre-norm transformer block: causal self-attention and a 4x MLP."""

    def __init__(self, config: DTConfig, rngs: nnx.Rngs):
        h = config.hidden
        self.norm1 = nnx.LayerNorm(h, rngs=rngs)
        self.attention = nnx.MultiHeadAttention(
            num_heads=config.heads, in_features=h, qkv_features=h, dropout_rate=config.dropout,
            decode=False, rngs=rngs, keep_rngs=False)
        self.norm2 = nnx.LayerNorm(h, rngs=rngs)
        self.up = nnx.Linear(h, 4 * h, rngs=rngs)
        self.down = nnx.Linear(4 * h, h, rngs=rngs)
        self.dropout = nnx.Dropout(config.dropout)

    def __call__(self, x: jax.Array, mask: jax.Array, rngs: nnx.Rngs | None) -> jax.Array:
        off = rngs is None
        attended = self.attention(self.norm1(x), mask=mask, deterministic=off, rngs=rngs)
        x = x + self.dropout(attended, deterministic=off, rngs=rngs)
        y = self.down(jax.nn.gelu(self.up(self.norm2(x))))
        return x + self.dropout(y, deterministic=off, rngs=rngs)


class DecisionTransformer(nnx.Module):
    """See the module docstring. Call with ``[B, K, ...]`` windows; returns
    the predicted actions ``[B, K, act_dim]`` (deterministic head) or the
    pre-squash Gaussian ``(mean, log_std)`` (stochastic head)."""

    def __init__(self, config: DTConfig, rngs: nnx.Rngs):
        self.config = config
        h = config.hidden
        self.embed_timestep = nnx.Embed(config.max_timestep, h, rngs=rngs)
        self.embed_return = nnx.Linear(1, h, rngs=rngs)
        self.embed_state = nnx.Linear(config.obs_dim, h, rngs=rngs)
        self.embed_action = nnx.Linear(config.act_dim, h, rngs=rngs)
        self.embed_norm = nnx.LayerNorm(h, rngs=rngs)
        self.embed_dropout = nnx.Dropout(config.dropout)
        self.blocks = nnx.List([Block(config, rngs) for _ in range(config.layers)])
        self.final_norm = nnx.LayerNorm(h, rngs=rngs)
        self.action_head = nnx.Linear(h, config.act_dim, rngs=rngs)
        if config.stochastic:
            self.log_std_head = nnx.Linear(h, config.act_dim, rngs=rngs)
            # Online DT's learned entropy temperature, exp(log_temperature).
            self.log_temperature = nnx.Param(jnp.log(jnp.array(0.1, jnp.float32)))

    def __call__(self, returns_to_go: jax.Array, states: jax.Array, actions: jax.Array,
                 timesteps: jax.Array, mask: jax.Array, *, rngs: nnx.Rngs | None = None):
        """returns_to_go [B, K] (scaled), states [B, K, obs_dim] (normalised),
        actions [B, K, act_dim], timesteps [B, K] int, mask [B, K] bool.
        Dropout is on when ``rngs`` (with a ``dropout`` stream) is given."""
        c = self.config
        b, k = states.shape[:2]
        if not c.condition_on_return:
            returns_to_go = jnp.zeros_like(returns_to_go)
        time = self.embed_timestep(jnp.clip(timesteps, 0, c.max_timestep - 1))
        tokens = jnp.stack([
            self.embed_return(returns_to_go[..., None]) + time,
            self.embed_state(states) + time,
            self.embed_action(actions / c.action_scale) + time,
        ], axis=2).reshape(b, 3 * k, c.hidden)  # R_1, s_1, a_1, R_2, ...
        x = self.embed_dropout(self.embed_norm(tokens), deterministic=rngs is None, rngs=rngs)
        token_mask = jnp.repeat(mask, 3, axis=1)
        attention_mask = nnx.combine_masks(
            nnx.make_causal_mask(token_mask), nnx.make_attention_mask(token_mask, token_mask))
        for block in self.blocks:
            x = block(x, attention_mask, rngs)
        state_tokens = self.final_norm(x).reshape(b, k, 3, c.hidden)[:, :, 1]
        mean = self.action_head(state_tokens)
        if not c.stochastic:
            return jnp.tanh(mean) * c.action_scale
        log_std = jnp.clip(self.log_std_head(state_tokens), *LOG_STD_RANGE)
        return mean, log_std


def squashed_gaussian_log_prob(mean: jax.Array, log_std: jax.Array, action: jax.Array,
                               scale: float) -> jax.Array:
    """log p(action) under scale * tanh(N(mean, exp(log_std))), summed over
    the action's dimensions ([...])."""
    y = jnp.clip(action / scale, -1 + 1e-6, 1 - 1e-6)
    z = jnp.arctanh(y)
    normal = -0.5 * ((z - mean) / jnp.exp(log_std)) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    jacobian = jnp.log(scale * (1 - y ** 2) + 1e-6)
    return jnp.sum(normal - jacobian, axis=-1)


def act(model: DecisionTransformer, returns_to_go, states, actions, timesteps, mask,
        key: jax.Array | None = None) -> jax.Array:
    """The action for the last step of each window ([B, act_dim]): the
    deterministic head's output, or the stochastic head's mean (or a sample
    when ``key`` is given)."""
    out = model(returns_to_go, states, actions, timesteps, mask)
    if not model.config.stochastic:
        return out[:, -1]
    mean, log_std = out[0][:, -1], out[1][:, -1]
    if key is not None:
        mean = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
    return jnp.tanh(mean) * model.config.action_scale
