"""Fetches, on a machine with PyPI, the wheels a GPU machine without a
registry lacks, for ``bash scripts/gpu_check.sh --wheels DIR``.

The GPU machines this project checks on reach no registry. Their image (Python
3.12, CUDA jax, flax, cupy, ...) lacks flashbax (scripts/bench_gpu.py's
baseline), gymnasium with MuJoCo (the locomotion tests), nbclient,
nbformat and ipykernel (the notebook tests), and TorchRL with tensordict
(scripts/bench_torchrl.py's GPU section). This resolves those with their
dependencies for CPython 3.12 on manylinux x86-64 (``pip download
--only-binary=:all:``; TorchRL's are listed instead: WANTED_NO_DEPS), then
keeps only the wheels of projects the image does not have (DEVICE_PACKAGES,
the image's package list as read on 2026-11-17), one version of each: a
second copy of a package the image has would shadow it. It refuses more than
64 MiB in all, as much as the working tree may carry to such a machine (43
MiB on 2026-11-30).

    python scripts/fetch_gpu_wheels.py [DIR]     # default .whl (git-ignored)
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WANTED = ["flashbax", "gymnasium[mujoco]", "nbclient", "nbformat", "ipykernel"]
# TorchRL for gpu_check.sh --stage torchrl, fetched without resolving: its
# requirements name torch, which pip would download (a CUDA build of several
# GB) before the image's copy is dropped. Its other requirements are listed,
# pinned to versions that meet theirs (tensordict 0.14.3: pyvers < 0.3).
WANTED_NO_DEPS = ["torchrl==0.14.1", "tensordict==0.14.3", "pyvers==0.2.3", "hoptorch==0.1.4",
                  "orjson==3.13.0", "importlib-metadata==10.2.0", "lazy-importer==0.1.0"]
PLATFORMS = ["manylinux_2_39_x86_64", "manylinux_2_35_x86_64", "manylinux_2_34_x86_64",
             "manylinux_2_31_x86_64", "manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64"]
LIMIT_BYTES = 64 << 20

# The GPU image's packages (as read on 2026-11-17), normalised (PEP 503).
DEVICE_PACKAGES = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs
botorch build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy
coverage cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython
diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools formulaic
frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize
hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib
jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator
lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes
mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx
ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc
nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand
nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13
nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging
pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf
psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest
pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core
scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools
shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard
tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz
torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers
treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug
wheel wrapt xarray xxhash yarl zipp
""".split())


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def project_of(wheel: str) -> str:
    """The normalised project name of a wheel file name (PEP 427: the name is
    the first dash-separated field, with dashes written as underscores)."""
    if not wheel.endswith(".whl") or wheel.count("-") < 4:
        raise ValueError(f"not a wheel file name: {wheel!r}")
    return normalise(wheel.split("-", 1)[0])


def select(wheels: list[str], have: frozenset[str] = DEVICE_PACKAGES) -> list[str]:
    """The wheels of projects not in `have`; raises if a project comes twice."""
    kept: dict[str, str] = {}
    for wheel in sorted(wheels):
        project = project_of(wheel)
        if project in have:
            continue
        if project in kept:
            raise ValueError(f"two wheels of {project}: {kept[project]} and {wheel}")
        kept[project] = wheel
    return list(kept.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", nargs="?", default=".whl", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
                   "--python-version", "3.12", "--implementation", "cp", "-d", tmp]
        for platform in PLATFORMS:
            command += ["--platform", platform]
        subprocess.run(command + WANTED, check=True)
        subprocess.run(command + ["--no-deps"] + WANTED_NO_DEPS, check=True)
        kept = select([p.name for p in Path(tmp).glob("*.whl")])
        total = sum((Path(tmp) / w).stat().st_size for w in kept)
        if total > LIMIT_BYTES:
            print(f"fetch_gpu_wheels: {total / 2**20:.1f} MiB is more than the working tree "
                  f"may carry to a GPU machine ({LIMIT_BYTES >> 20} MiB)", file=sys.stderr)
            return 1
        args.dir.mkdir(parents=True, exist_ok=True)
        for old in args.dir.glob("*.whl"):
            old.unlink()
        for wheel in kept:
            shutil.copy2(Path(tmp) / wheel, args.dir / wheel)
    print(f"{len(kept)} wheels, {total / 2**20:.1f} MiB, in {args.dir}:")
    for wheel in kept:
        print(f"  {wheel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
