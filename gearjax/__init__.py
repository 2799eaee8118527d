"""gearjax: GPU-centric experience replay for JAX.

Trajectory tables in native memory, sampled from inside ``jax.jit`` through XLA
FFI custom calls. The public names are all here::

    import gearjax as gx
    table = gx.Table({"obs": gx.Column((17,), "float32")}, capacity=10_000, max_length=1000)
    key = table.insert({"obs": obs})
    state = table.state()        # threaded through the table's calls in compiled code
    state, batch = table.sample(state, rng, batch_size=64, window=20, strategy=gx.Timestep())
"""

import importlib.metadata
import sys

# pyproject.toml holds the version; the installed package's metadata carries it here.
__version__ = importlib.metadata.version("gearjax")

# First: which native extension gearjax._gearjax is (the CUDA plugin's where
# it is installed; gearjax/_plugin.py).
from gearjax import _plugin  # noqa: E402

_plugin.select(sys.modules[__name__], __version__)

from gearjax import _cuda, _gearjax  # noqa: E402
from gearjax.batch import Batch
from gearjax.checkpoint import CheckpointError
from gearjax.columns import Column
from gearjax.errors import table_error
from gearjax.rate_limiters import MinSize, SampleToInsertRatio
from gearjax.sharded import ShardedBatch, ShardedTable
from gearjax.state import TableState
from gearjax.strategies import (Prioritized, PrioritizedSteps, Recent, Strategy, Timestep, TopK,
                                Uniform)
from gearjax.table import Table

__all__ = [
    "Batch", "CheckpointError", "Column", "MinSize", "Prioritized", "PrioritizedSteps", "Recent",
    "SampleToInsertRatio", "ShardedBatch", "ShardedTable", "Strategy", "Table", "TableState",
    "Timestep", "TopK", "Uniform", "table_error",
]

# A GPU JAX and no CUDA handlers: say so once, with the fix (gearjax/_cuda.py).
_cuda.warn_if_missing(_gearjax.cuda_built, _cuda.jax_cuda_plugin())
