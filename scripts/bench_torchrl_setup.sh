#!/usr/bin/env bash
# The environment scripts/bench_torchrl.py runs in: gearjax and TorchRL in one
# process, on Python 3.11 (where the CPU build of torch 2.13 on these machines
# exists; JAX stops at 0.10 there).
#
#   bash scripts/bench_torchrl_setup.sh          # makes or completes .venv-torchrl
#   .venv-torchrl/bin/python scripts/bench_torchrl.py --quick
#
# What it installs into $TORCHRL_VENV (default .venv-torchrl, git-ignored):
#  * torch==2.13.0 (the CPU build that lies on these machines' disk: any other
#    version would download a CUDA build of several GB), jax and jaxlib 0.10.2;
#  * torchrl 0.14.1 and what it requires (tensordict < 0.15, which torchrl 0.14.1
#    pins) from the registry. TorchRL ships no wheel built against torch 2.13, and
#    its prioritized samplers need its C++ extension (torchrl._torchrl: the sum and
#    min segment trees): the extension is rebuilt here from the C++ sources the
#    wheel carries (torchrl/csrc/), against the installed torch, with
#    torch.utils.cpp_extension, and replaces the wheel's. tensordict's own
#    extension (tensordict._C), where it does not load, is rebuilt the same way
#    from its sources if the wheel carries them; else the script stops, saying so;
#  * gearjax, built for this Python from the repository's committed HEAD (git
#    archive, so a half-edited work tree is not what gets measured), CPU handlers
#    only (GEARJAX_CUDA=OFF), GEARJAX_TESTING=OFF. GEARJAX_SOURCE=worktree builds
#    the work tree instead. It is rebuilt only when the sources changed.
#
# It ends by checking that torchrl's extension loads and a PrioritizedSampler
# samples, and prints the versions. Run again, it does only what is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv="${TORCHRL_VENV:-.venv-torchrl}"
case "$venv" in /*) ;; *) venv="$PWD/$venv" ;; esac
TORCH=2.13.0
JAX=0.10.2
TORCHRL=0.14.1
say() { echo "bench_torchrl_setup: $*" >&2; }

python=$(bash scripts/find_python.sh 3.11) || {
  say "no Python 3.11 found (torch $TORCH's CPU build on this disk is for Python 3.11)"
  exit 1
}
if [ ! -x "$venv/bin/python" ]; then
  say "creating $venv with $python"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
fi
py="$venv/bin/python"
pip() { "$py" -m pip "$@"; }

have() {  # have DIST VERSION: the distribution is installed at that version
  "$py" -c "import importlib.metadata as m, sys
try: sys.exit(m.version('$1').split('+')[0] != '$2')
except m.PackageNotFoundError: sys.exit(1)"
}

if ! have torch "$TORCH"; then
  say "installing torch==$TORCH (the CPU build on this disk)"
  pip install --quiet "torch==$TORCH"
fi
if ! have jax "$JAX" || ! have jaxlib "$JAX"; then
  say "installing jax==$JAX"
  pip install --quiet "jax==$JAX" "jaxlib==$JAX"
fi
if ! have torchrl "$TORCHRL"; then
  say "installing torchrl==$TORCHRL (torch stays at $TORCH)"
  pip install --quiet "torchrl==$TORCHRL" "torch==$TORCH" setuptools ninja pybind11
fi

# Rebuilds one package's C++ extension from the sources its wheel carries,
# against the installed torch: rebuild PACKAGE MODULE SOURCES_GLOB...
rebuild_extension() { "$py" scripts/torch_extension.py "$@"; }

# loads MODULE: it imports beside the installed torch (else its error is kept in $load_error)
loads() {
  load_error=$("$py" -c "import torch, importlib; importlib.import_module('$1')" 2>&1 | tail -n 1)
  [ -z "$load_error" ]
}

if ! loads tensordict._C; then
  say "tensordict._C does not load with torch $TORCH ($load_error): rebuilding it from its sources"
  rebuild_extension tensordict tensordict._C 'csrc/*.cpp' 'csrc/**/*.cpp'
fi
if ! loads torchrl._torchrl; then
  say "torchrl._torchrl does not load with torch $TORCH ($load_error): rebuilding it from" \
      "the wheel's torchrl/csrc (CPU: pybind.cpp, utils.cpp)"
  rebuild_extension torchrl torchrl._torchrl csrc/pybind.cpp csrc/utils.cpp
fi

# gearjax for this Python, CPU handlers only, rebuilt when its sources changed.
if [ "${GEARJAX_SOURCE:-head}" = worktree ]; then
  stamp_id="worktree-$({ bash scripts/sources_hash.sh; "$py" --version; } | sha256sum | cut -c1-16)"
else
  # The committed sources' trees: a commit that changes none of them reuses the build.
  stamp_id="head-$(git rev-parse --short HEAD) trees $(git rev-parse HEAD:gearjax HEAD:xla_ffi \
    HEAD:pyproject.toml | cut -c1-12 | tr '\n' ' ')"
fi
if [ "$(cut -d' ' -f2- "$venv/gearjax-built" 2>/dev/null)" != "$(echo "$stamp_id" | cut -d' ' -f2-)" ]; then
  wheels="$venv/gearjax-wheel"
  rm -rf "$wheels"
  if [ "${GEARJAX_SOURCE:-head}" = worktree ]; then
    src="$PWD"
  else
    src=$(mktemp -d /tmp/gearjax-src.XXXXXX)
    git archive HEAD | tar -x -C "$src"
  fi
  say "building gearjax for Python 3.11 from $stamp_id (CPU handlers only; a few minutes on 2 cores)"
  (cd "$src" && GEARJAX_CUDA=OFF GEARJAX_TESTING=OFF "$py" -m pip wheel --quiet --no-deps \
     --wheel-dir "$wheels" .)
  pip install --quiet --force-reinstall --no-deps "$wheels"/gearjax-*.whl
  if [ "$src" != "$PWD" ]; then rm -rf "$src"; fi
  echo "$stamp_id" >"$venv/gearjax-built"
fi

"$py" -P - <<'EOF'
import importlib.metadata as m
import warnings
warnings.simplefilter("error", UserWarning)  # "torchrl C++ extension is not available"
import torch
import torchrl._torchrl  # noqa: F401  (the rebuilt segment trees)
from torchrl.data import LazyTensorStorage, PrioritizedSampler, ReplayBuffer
from tensordict import TensorDict
rb = ReplayBuffer(storage=LazyTensorStorage(100), sampler=PrioritizedSampler(100, 0.6, 0.4),
                  batch_size=8)
rb.extend(TensorDict({"x": torch.arange(100.0)}, batch_size=[100]))
batch, info = rb.sample(return_info=True)
rb.update_priority(info["index"], torch.ones(8))
import gearjax  # noqa: F401
print("bench_torchrl_setup: ready:", ", ".join(
    f"{p} {m.version(p)}" for p in ("torch", "torchrl", "tensordict", "jax", "jaxlib", "gearjax")))
EOF
