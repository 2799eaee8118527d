"""Rebuilds a package's C++ extension from the sources its wheel carries,
against the installed torch (torch.utils.cpp_extension), and puts it in place
of the wheel's. For TorchRL, whose wheels are built against one torch and
without its CUDA segment trees, and tensordict (scripts/bench_torchrl_setup.sh
on the CPU, scripts/gpu_check.sh --stage torchrl on a lent GPU).

    python scripts/torch_extension.py PACKAGE MODULE SOURCE_GLOB... [--cuda] [--check NAME]

``--cuda`` builds the ``.cu`` sources too, with ``-DWITH_CUDA`` (TorchRL's
switch for its CUDA trees), for the architecture of the GPU torch sees.
``--check NAME`` fails unless the rebuilt module has the attribute NAME.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile


def sources_of(package: str, globs: list[str]) -> tuple[str, list[str]]:
    """The package's folder and the sources the globs match in it."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        sys.exit(f"torch_extension: {package} is not installed")
    root = os.path.dirname(spec.origin)
    sources = sorted({s for g in globs for s in glob.glob(os.path.join(root, g), recursive=True)})
    if not sources:
        sys.exit(f"torch_extension: {package}'s wheel carries no sources matching {globs}: "
                 f"its extension cannot be rebuilt against this torch")
    return root, sources


def rebuild(package: str, module: str, globs: list[str], cuda: bool) -> str:
    """Builds MODULE from the package's sources and replaces the installed
    one (atomically); returns its path."""
    from torch.utils.cpp_extension import load
    root, sources = sources_of(package, globs)
    flags = ["-O3", "-std=c++17"] + (["-DWITH_CUDA"] if cuda else [])
    cuda_flags = []
    if cuda:
        import torch
        if not torch.cuda.is_available():
            sys.exit("torch_extension: --cuda, but torch sees no CUDA GPU")
        major, minor = torch.cuda.get_device_capability(0)
        cuda_flags = ["-O3", "-DWITH_CUDA", f"-gencode=arch=compute_{major}{minor},"
                                            f"code=sm_{major}{minor}"]
    elif any(s.endswith(".cu") for s in sources):
        sys.exit("torch_extension: .cu sources given without --cuda")
    name = module.rsplit(".", 1)[-1]
    build = tempfile.mkdtemp(prefix=f"{package}-ext-")
    lib = load(name=name, sources=sources, build_directory=build, verbose=False,
               extra_cflags=flags, extra_cuda_cflags=cuda_flags,
               extra_include_paths=[os.path.dirname(sources[0])])
    target = os.path.join(root, name + sysconfig.get_config_var("EXT_SUFFIX"))
    shutil.copyfile(lib.__file__, target + ".new")
    os.replace(target + ".new", target)
    print(f"torch_extension: rebuilt {module} from {len(sources)} sources"
          f"{' (with CUDA)' if cuda else ''} -> {target}", file=sys.stderr)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package")
    parser.add_argument("module")
    parser.add_argument("sources", nargs="+", help="globs in the package's folder")
    parser.add_argument("--cuda", action="store_true")
    parser.add_argument("--check", default=None)
    args = parser.parse_args(argv)
    rebuild(args.package, args.module, args.sources, args.cuda)
    if args.check:
        # A fresh interpreter: this one may hold the old module already.
        code = (f"import torch, importlib; m = importlib.import_module({args.module!r}); "
                f"assert hasattr(m, {args.check!r}), 'no {args.check} in ' + m.__file__")
        if subprocess.run([sys.executable, "-c", code]).returncode != 0:
            print(f"torch_extension: the rebuilt {args.module} fails its check: it does not "
                  f"import, or has no {args.check} (the error above)", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
