"""MkDocs hooks for the gearjax docs (mkdocs.yml: ``hooks:``).

The notebooks and the committed results live outside ``docs/``; this brings
them into the site at build time, so nothing is copied by hand and nothing can
go stale:

* every ``notebooks/*.ipynb`` becomes the page ``notebooks/<name>.ipynb``
  (mkdocs-jupyter renders it, from its committed outputs; never executed);
* every file in ``benchmarks/results/`` (and its folders) is published as
  ``results/files/<name>``, and the generated page ``results/files.md`` lists
  them all: which script made each, the machine the file records, and the
  file itself (text and small JSON shown inline, plots shown, every file
  linked).

A results file that ``SOURCES`` below does not cover is a build warning, which
``mkdocs build --strict`` (tests/test_docs.py) turns into a failure: a new
result cannot be forgotten.
"""

from __future__ import annotations

import fnmatch
import json
import logging
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.gearjax")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
RESULTS = ROOT / "benchmarks" / "results"
RESULTS_URI = "results/files"          # where the results files go in the site
LISTING_URI = "results/files.md"       # the generated page listing them
INLINE_JSON_BYTES = 32 * 1024          # larger JSON files are linked, not shown

# Which script made each committed results file (first match wins).
SOURCES: list[tuple[str, str]] = [
    ("bench_one_sided_strategies_cpu_run*.json",
     "`python scripts/bench_one_sided_strategies.py --repeats 30 --baseline <a run of the "
     "earlier build> --out benchmarks/results/bench_one_sided_strategies_cpu_run<n>.json`: "
     "nixl samples by each strategy, eagerly and in jit, against an earlier build (its run "
     "inside, under 'baseline')"),
    ("bench_one_sided_strategies_cpu_run*.txt",
     "the printed report of `scripts/bench_one_sided_strategies.py`, the same run as the "
     "JSON file of the same name"),
    ("bench_nixl_reader_cpu.json",
     "`python scripts/bench_nixl_reader.py --repeats 30 --out "
     "benchmarks/results/bench_nixl_reader_cpu.json`: NIXL reads by the native agent and "
     "by NIXL's Python API, and whole one-sided samples against the read alone"),
    ("bench_nixl_reader_cpu.txt",
     "the printed report of `scripts/bench_nixl_reader.py`, the same run as the JSON file "
     "of the same name"),
    ("bench_sample_cpu_run*.json",
     "`python scripts/bench_sample.py --repeats 50 --scan-repeats 21`, one full run"),
    ("bench_sample_cpu_run*.txt",
     "the printed report of `scripts/bench_sample.py`, the same run as the JSON file "
     "of the same name"),
    ("bench_exchange_cpu_run*.json",
     "`scripts/bench_exchange.py` (1 and 2 local processes), one full run"),
    ("bench_exchange_cpu_run*.txt",
     "the printed report of `scripts/bench_exchange.py`, the same run as the JSON file "
     "of the same name"),
    ("bench_exchange_pack_none_r*_cpu.json",
     "`python scripts/bench_exchange.py --processes 2` (2-core AMD EPYC dev VM, jax 0.12) with "
     "the `xla` exchange as it was before 33c5a7e, each field of a row in its own all-to-all "
     "(runs 1-2 took turns with the pack_all runs, 3-5 with the pack_small runs)"),
    ("bench_exchange_pack_all_r*_cpu.json",
     "`python scripts/bench_exchange.py --processes 2` (same VM) at 33c5a7e: every field of a "
     "row packed into one all-to-all, the window too"),
    ("bench_exchange_pack_small_r*_cpu.json",
     "`python scripts/bench_exchange.py --processes 2` (same VM): fields of at most "
     "`row_words.PACK_ROW_BYTES` a row packed into one all-to-all, larger windows alone"),
    ("bench_exchange_pack_*_cpu.txt",
     "the printed report of `scripts/bench_exchange.py`, the same run as the JSON file "
     "of the same name"),
    ("bench_exchange_model_cpu.txt",
     "`python scripts/bench_exchange.py --model-from benchmarks/results/bench_exchange_cpu_runN.json` "
     "for N = 1, 2, 3: the cluster model of each committed run, arithmetic, not measurements"),
    ("bench_exchange_scaling_cpu.json",
     "`python scripts/bench_exchange_scaling.py --plot` (P = 2 to 64 host devices "
     "of one process), one full run of three repeats, its model refitted with `--report-from`"),
    ("bench_exchange_scaling_cpu.txt",
     "the printed report of `scripts/bench_exchange_scaling.py` (same run)"),
    ("bench_exchange_scaling_cpu.png", "`scripts/bench_exchange_scaling.py --plot` (same run)"),
    ("bench_exchange_scaling_cpu_run2.*",
     "`python scripts/bench_exchange_scaling.py --plot --out "
     "benchmarks/results/bench_exchange_scaling_cpu_run2.json`: a second full run of three "
     "repeats, made right after the first to check that its fit repeats"),
    ("bench_actors_cpu.json", "`python /path/to/scripts/bench_actors.py --out ...` run from outside the "
     "repository root (Ray's workers put their working directory first on their path, and the "
     "source tree has no compiled extension)"),
    ("bench_actors_cpu.txt", "the printed report of `scripts/bench_actors.py` (same run)"),
    ("bench_actors_cpu.png", "`scripts/bench_actors.py` (same run)"),
    ("bench_sample_modes_cpu.json",
     "`python scripts/bench_sample_modes.py --out benchmarks/results/bench_sample_modes_cpu.json`"),
    ("bench_sample_modes_cpu.txt",
     "the printed report of `scripts/bench_sample_modes.py` (same run)"),
    ("bench_writer_cpu.json",
     "`python scripts/bench_writer.py --reverb-python /work/reverb-venv/bin/python "
     "--repeats 11` (Reverb in its own virtual environment)"),
    ("bench_writer_cpu.txt", "the printed report of `scripts/bench_writer.py` (same run)"),
    ("bench_core_cpu.txt", "`scripts/bench_core.cc` (the native core alone)"),
    ("bench_dispatch_cpu.json",
     "`python scripts/bench_dispatch.py --reverb-python REVERB_VENV/bin/python` "
     "(Reverb in its own virtual environment)"),
    ("bench_dispatch_cpu.txt", "the printed report of `scripts/bench_dispatch.py` (same run)"),
    ("bench_eager_cpu.json", "`python scripts/bench_eager.py` (2-core dev VM, CPU only)"),
    ("bench_eager_cpu.txt", "the printed report of `scripts/bench_eager.py` (same run)"),
    ("bench_eager_70410d1_cpu.json",
     "`PYTHONPATH=CHECKOUT_OF_70410d1_WITH_2dee8e9s_EXTENSION python scripts/bench_eager.py` "
     "right after bench_eager_cpu.json's run (the same 2-core AMD EPYC VM, Python 3.12.1, "
     "jax 0.12.0.1): 70410d1's Python layer, before 2dee8e9's eager-call changes"),
    ("bench_eager_70410d1_cpu.txt", "the printed report of `scripts/bench_eager.py` (same run)"),
    ("bench_eager_f9dbada_cpu.json",
     "`python scripts/bench_eager.py` at f9dbada (the same 2-core AMD EPYC VM, Python 3.12.1, "
     "jax 0.12.0.1), after its eager state-form wait and kept-alpha changes"),
    ("bench_eager_f9dbada_cpu.txt", "the printed report of `scripts/bench_eager.py` (same run)"),
    ("bench_eager_c1f5d91_cpu.json",
     "`python scripts/bench_eager.py` at c1f5d91 (the same 2-core AMD EPYC VM, Python 3.12.1, "
     "jax 0.12.0.1), after eager state-form calls stopped waiting for a state already ready"),
    ("bench_eager_c1f5d91_cpu.txt", "the printed report of `scripts/bench_eager.py` (same run)"),
    ("bench_eager_9d99e5a_cpu.json",
     "`python scripts/bench_eager.py` at 9d99e5a (the same 2-core AMD EPYC VM, Python 3.12.1, "
     "jax 0.12.0.1), the first run with the jitted-where form and the programs' flops"),
    ("bench_eager_9d99e5a_cpu.txt", "the printed report of `scripts/bench_eager.py` (same run)"),
    ("count_against_70410d1_eager_calls_cpu.json",
     "`python scripts/count_against.py --baseline CHECKOUT_OF_70410d1 --baseline-name "
     "HEAD-70410d1 --current THE_SAME_WITH_2dee8e9s_PYTHON_LAYER --workloads "
     "eager_update,eager_sample --jobs 2` (one extension for both: the change is Python only; "
     "Python 3.12.1, jax 0.12.0.1, under valgrind's callgrind, 2-core AMD EPYC VM)"),
    ("count_against_70410d1_eager_calls_cpu.txt",
     "the printed report of `scripts/count_against.py` (same run)"),
    ("count_against_c620676_step_update_cpu.json",
     "`python scripts/count_against.py --baseline BUILD_OF_ce398d0 --baseline-name ce398d0 "
     "--current BUILD_OF_c620676 --workloads step_update --jobs 2` (both extensions CPU-only "
     "Release builds made alike; Python 3.12.1, jax 0.12.0.1, under valgrind's callgrind, "
     "2-core AMD EPYC VM)"),
    ("count_against_c620676_step_update_cpu.txt",
     "the printed report of `scripts/count_against.py` (same run)"),
    ("count_against_fff1a09_step_update_cpu.json",
     "`python scripts/count_against.py --baseline BUILD_OF_e1e7518 --baseline-name e1e7518 "
     "--current BUILD_OF_fff1a09 --workloads step_update --jobs 2` (both extensions CPU-only "
     "Release builds made alike; Python 3.12.1, jax 0.12.0.1, under valgrind's callgrind, "
     "2-core AMD EPYC VM)"),
    ("count_against_fff1a09_step_update_cpu.txt",
     "the printed report of `scripts/count_against.py` (same run)"),
    ("bench_torchrl_cpu.json",
     "`.venv-torchrl/bin/python scripts/bench_torchrl.py` in the environment "
     "`bash scripts/bench_torchrl_setup.sh` makes (2-core dev VM, CPU only; TorchRL 0.14.1 "
     "on torch 2.13.0, both libraries in one process)"),
    ("bench_torchrl_cpu.txt", "the printed report of `scripts/bench_torchrl.py` (same run)"),
    ("bench_torchrl_7e099ef_cpu.json",
     "`.venv-torchrl/bin/python scripts/bench_torchrl.py --out ...` at 7e099ef (the same VM and "
     "environment; the per-step forms name the sampled steps by batch.timestep)"),
    ("bench_torchrl_7e099ef_cpu.txt", "the printed report of `scripts/bench_torchrl.py` (same run)"),
    ("bench_call_sites_cpu.json",
     "`python scripts/bench_call_sites.py --baseline BUILD_OF_25be2b8 --baseline-name "
     "\"main 25be2b8\"` (2-core dev VM)"),
    ("bench_call_sites_cpu.txt",
     "the printed report of `scripts/bench_call_sites.py` (same run)"),
    ("bench_table_churn_cpu.json",
     "`python scripts/bench_table_churn.py` (2-core dev VM, CPU only; main cebb8a9 with the "
     "per-table compiled sample)"),
    ("bench_table_churn_cpu.txt",
     "the printed report of `scripts/bench_table_churn.py` (same run)"),
    ("bench_against_cpu.json",
     "`python scripts/bench_against.py --baseline BUILD_OF_8178ead --baseline-name "
     "\"main 8178ead\" --current BUILD_OF_ed2bfbe --rounds 8` (both CPU-only Release builds, "
     "2-core dev VM)"),
    ("bench_against_cpu.txt", "the printed report of `scripts/bench_against.py` (same run)"),
    ("bench_against_eager_c612fe0_0ea5dc0_cpu.json",
     "`python scripts/bench_against.py --benches eager --rounds 6 --baseline BUILD_OF_c612fe0 "
     "--baseline-name \"main c612fe0\" --current BUILD_OF_0ea5dc0` (both CPU-only Release "
     "builds, Python 3.12, jax 0.12.0.1, 2-core dev VM): the CPU handler writing mask and "
     "timestep"),
    ("bench_against_eager_c612fe0_0ea5dc0_cpu.txt",
     "the printed report of `scripts/bench_against.py` (same run)"),
    ("bench_against_chunks_99e497b_cpu.json",
     "`python scripts/bench_against.py --benches eager,sample --rounds 4 --baseline "
     "BUILD_OF_99e497b --baseline-name main-99e497b --current BUILD_OF_99e497b_WITH_64KIB_CHUNKS` "
     "(both CPU-only Release builds, Python 3.12, jax 0.12, 2-core dev VM): the CPU gather "
     "shared out in 64 KiB chunks instead of 1 MiB"),
    ("bench_against_chunks_99e497b_cpu.txt",
     "the printed report of `scripts/bench_against.py` (same run)"),
    ("bench_against_prefetch_0a88ac0_8e6c2e3_r4_cpu.json",
     "`python scripts/bench_against.py --benches sample --rounds 4 --baseline BUILD_OF_0a88ac0 "
     "--baseline-name 0a88ac0 --current BUILD_OF_8e6c2e3` (both CPU-only Release builds, "
     "Python 3.12, jax 0.12, 2-core dev VM): the gather's prefetch loop of 8e6c2e3 in time"),
    ("bench_against_prefetch_0a88ac0_8e6c2e3_r4_cpu.txt",
     "the printed report of `scripts/bench_against.py` (same run)"),
    ("bench_against_prefetch_0a88ac0_8e6c2e3_r6_cpu.json",
     "`python scripts/bench_against.py --benches sample --rounds 6 --baseline BUILD_OF_0a88ac0 "
     "--baseline-name 0a88ac0 --current BUILD_OF_8e6c2e3` (both CPU-only Release builds, "
     "Python 3.12, jax 0.12, 2-core dev VM): the gather's prefetch loop of 8e6c2e3 in time"),
    ("bench_against_prefetch_0a88ac0_8e6c2e3_r6_cpu.txt",
     "the printed report of `scripts/bench_against.py` (same run)"),
    ("count_against_cpu.json",
     "`python scripts/count_against.py --baseline BUILD_OF_8178ead --baseline-name "
     "\"main 8178ead\" --current BUILD_OF_6042d32 --jobs 1` (both CPU-only Release builds, under "
     "valgrind's callgrind, 2-core dev VM), reported again with `--report-from` (the sums "
     "judged by)"),
    ("count_against_cpu.txt", "the printed report of `scripts/count_against.py` (same run)"),
    ("count_against_self_cpu.json",
     "`python scripts/count_against.py --baseline BUILD_OF_8178ead --baseline-name "
     "\"8178ead again\" --current BUILD_OF_8178ead --jobs 1 "
     "--out benchmarks/results/count_against_self_cpu.json`: one build against itself, the "
     "method's floor (2-core dev VM, run beside the comparison), reported again with "
     "`--report-from`"),
    ("count_against_self_cpu.txt",
     "the printed report of `scripts/count_against.py` (same run)"),
    ("count_against_2a7b2a8_cpu.json",
     "`python scripts/count_against.py --baseline BUILD_OF_2a7b2a8 --baseline-name 2a7b2a8 "
     "--current BUILD_OF_41618f0` (both CPU-only Release builds for Python 3.11 with jax "
     "0.10.2, under valgrind's callgrind, 2-core dev VM)"),
    ("count_against_2a7b2a8_cpu.txt",
     "the printed report of `scripts/count_against.py` (same run)"),
    ("wheel_core_cp312_auditwheel_show.txt",
     "`bash scripts/build_wheels.sh 3.12`, then `auditwheel show` of the repaired wheel (what "
     "the script writes beside it in dist/)"),
    ("wheel_cuda13_plugin_cp312_auditwheel_show.txt",
     "`CUDACXX=build/cuda13-pypi/nvidia/cu13/bin/nvcc GEARJAX_WHEELS=plugin bash "
     "scripts/build_wheels.sh 3.12` (nvcc from PyPI, default architectures), then `auditwheel "
     "show` of the repaired plugin wheel and `cuobjdump`'s list of its kernels"),
    ("count_against_2a7b2a8_0e00296_cpu.json",
     "`python scripts/count_against.py --baseline BUILD_OF_2a7b2a8 --baseline-name 2a7b2a8 "
     "--current BUILD_OF_0e00296` (the stateless compiled form removed; both CPU-only Release "
     "builds for Python 3.11 with jax 0.10.2, under valgrind's callgrind, 2-core dev VM)"),
    ("count_against_2a7b2a8_0e00296_cpu.txt",
     "the printed report of `scripts/count_against.py` (same run)"),
    ("count_against_2a7b2a8_0e00296_rerun_cpu.json",
     "the same command with `--workloads prioritized,sample`, run right after it"),
    ("count_against_2a7b2a8_0e00296_rerun_cpu.txt",
     "the printed report of `scripts/count_against.py` (same run)"),
    ("count_against_2a7b2a8_09713c5_cpu.json",
     "`python scripts/count_against.py --baseline BUILD_OF_2a7b2a8 --baseline-name 2a7b2a8 "
     "--current BUILD_OF_09713c5` (issue 50's refactors and issue 49's per-step priorities; "
     "both CPU-only Release builds for Python 3.11 with jax 0.10.2, under valgrind's "
     "callgrind, 2-core dev VM)"),
    ("count_against_2a7b2a8_09713c5_cpu.txt",
     "the printed report of `scripts/count_against.py` (same run)"),
    ("count_against_2a7b2a8_b269008_cpu.json",
     "`python scripts/count_against.py --baseline BUILD_OF_2a7b2a8 --baseline-name 2a7b2a8 "
     "--current BUILD_OF_b269008 --jobs 2` with .venv-torchrl's Python 3.11.7 and jax 0.10.2 "
     "(both CPU-only Release builds, under valgrind's callgrind, 2-core dev VM)"),
    ("count_against_2a7b2a8_b269008_cpu.txt",
     "the printed report of `scripts/count_against.py` (same run), with the command"),
    ("count_against_d24085f_eager_checks_cpu.json",
     "`python scripts/count_against.py --baseline CHECKOUT_OF_d24085f --baseline-name before "
     "--current THE_SAME_WITH_76fcf81s_PYTHON_CHECKS --workloads eager_update --jobs 2` "
     "(one extension for both: the change is Python only; Python 3.12.1, jax 0.12.0.1, under "
     "valgrind's callgrind, 2-core AMD EPYC VM)"),
    ("count_against_d24085f_eager_checks_cpu.txt",
     "the printed report of `scripts/count_against.py` (same run)"),
    ("count_against_2a7b2a8_1676c16_cpu.json",
     "`python scripts/count_against.py --baseline BUILD_OF_2a7b2a8 --baseline-name 2a7b2a8 "
     "--current BUILD_OF_1676c16 --jobs 2` with .venv-torchrl's Python 3.11.7 and jax 0.10.2 "
     "(both CPU-only Release builds, under valgrind's callgrind, 2-core dev VM)"),
    ("count_against_2a7b2a8_1676c16_cpu.txt",
     "the printed report of `scripts/count_against.py` (same run), with the command and a "
     "function-level trace of the sample workload"),
    ("count_against_2a7b2a8_0a88ac0_cpu.json",
     "`python scripts/count_against.py --baseline BUILD_OF_2a7b2a8 --baseline-name 2a7b2a8 "
     "--current BUILD_OF_0a88ac0 --jobs 2` with Python 3.12.1 and jax 0.11.2 (both CPU-only "
     "Release builds, under valgrind's callgrind, 2-core dev VM): before 8e6c2e3"),
    ("count_against_2a7b2a8_0a88ac0_cpu.txt",
     "the printed report of `scripts/count_against.py` (same run), with the command"),
    ("gather_rows_instructions_cpu.txt",
     "`python scripts/callgrind_instructions.py` on the sample workload's driver (220 calls) "
     "under callgrind for 2a7b2a8, 0a88ac0 and 8e6c2e3: GatherRows instruction by "
     "instruction (2-core dev VM)"),
    ("count_against_2a7b2a8_8e6c2e3_cpu.json",
     "`python scripts/count_against.py --baseline BUILD_OF_2a7b2a8 --baseline-name 2a7b2a8 "
     "--current BUILD_OF_8e6c2e3 --jobs 2` with Python 3.12.1 and jax 0.11.2 (both CPU-only "
     "Release builds, under valgrind's callgrind, 2-core dev VM)"),
    ("count_against_2a7b2a8_8e6c2e3_cpu.txt",
     "the printed report of `scripts/count_against.py` (same run), with the command and the "
     "instruction-level trace of `GatherRows` that found the prefetch loop's extra "
     "instruction"),
    ("count_against_2a7b2a8_7fea72d_prioritized_functions_cpu.txt",
     "`python -P scripts/count_against.py --drive prioritized 520` under `valgrind "
     "--tool=callgrind` for the builds of 2a7b2a8 and 7fea72d (PYTHONPATH=BUILD, "
     "OPENBLAS_NUM_THREADS=1, PYTHONHASHSEED=0, setarch -R, Python 3.11.7, jax 0.10.2, 2-core "
     "dev VM), each function's count in the extension from `callgrind_annotate "
     "--threshold=100`, divided by 520"),
    ("count_against_2a7b2a8_7fea72d_cpu.json",
     "the same command for 7fea72d (Table.insert without np.ndim for a Python number), run "
     "after it"),
    ("count_against_2a7b2a8_7fea72d_cpu.txt",
     "the printed report of `scripts/count_against.py` (same run)"),
    ("bench_dqn_cpu.json", "`python scripts/bench_dqn.py --seeds 0,1,2`"),
    ("bench_insert_step_cpu.json", "`python scripts/bench_insert_step.py`"),
    ("bench_insert_step_cpu.txt", "the printed report of `scripts/bench_insert_step.py` (same run)"),
    ("bench_dqn_cpu.txt", "the printed report of `scripts/bench_dqn.py` (same run)"),
    ("bench_dt_step_cpu.json", "`python scripts/bench_dt_step.py`"),
    ("dt_vs_bc_mountaincar_cpu.*", "`python scripts/dt_results.py`"),
    ("demo_setup_cpu.txt",
     "`bash scripts/demo.sh --out /tmp/demo_out`, twice on a fresh clone, under "
     "`/usr/bin/time`: the set-up command's first run (creates the environment, builds, "
     "installs the `rl` extra) against its second (nothing rebuilt or reinstalled)"),
    ("dt_halfcheetah_cpu.*", "`python scripts/dt_results.py`"),
    ("dt_vs_bc_pendulum_cpu.json", "`python scripts/dt_results.py`"),
    ("online_dt_mountaincar_cpu.json", "`python scripts/dt_results.py`"),
    ("tune_dt_cpu.json", "`python scripts/tune_dt.py` (its defaults)"),
    ("tune_dt_cpu.txt", "the printed report of `scripts/tune_dt.py` (same run)"),
    ("gpu_h100_2026-11-26/*",
     "the project's first GPU run (an H100 80GB, jax 0.11.2, main 8178ead, 2026-11-26), made "
     "for the project by hand with the probes kept beside the logs; `README.txt` in the same "
     "folder says which file shows what"),
    ("gpu_h200_2026-11-30/*",
     "the project's second GPU run (an H200, jax 0.11.2, main 3138e6c, 2026-11-30): "
     "`bash scripts/gpu_check.sh --wheels .whl` and its sanitize stage again, the lent "
     "machine's paths replaced; `README.txt` in the same folder says which file shows what"),
    # What `bash scripts/gpu_check.sh` (and its `--stage full`) writes.
    ("gpu_check_*", "`bash scripts/gpu_check.sh` (its stage logs, each stage's seconds "
     "against its budget in `gpu_check_stages.jsonl`, JUnit reports, facts and summary)"),
    ("bench_gpu_quick_*.json", "`python scripts/bench_gpu.py --quick` (the goal rows with "
     "their references), run by `bash scripts/gpu_check.sh`"),
    ("bench_gpu_*.json", "`python scripts/bench_gpu.py --with-1e7`, run by "
     "`bash scripts/gpu_check.sh --stage full`"),
    ("bench_dt_step_gpu.json", "`python scripts/bench_dt_step.py --sizes reference`, run by "
     "`bash scripts/gpu_check.sh`"),
]


def result_files() -> list[Path]:
    """Every committed results file, in folders too (a GPU run keeps its logs
    in one of its own)."""
    return sorted(p for p in RESULTS.rglob("*")
                  if p.is_file() and not any(part.startswith(".")
                                             for part in p.relative_to(RESULTS).parts))


def _name(path: Path) -> str:
    """A results file's name under benchmarks/results/ ("dir/file" in a folder)."""
    return path.relative_to(RESULTS).as_posix()


def notebook_files() -> list[Path]:
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def _source(name: str) -> str | None:
    for pattern, source in SOURCES:
        if fnmatch.fnmatch(name, pattern):
            return source
    return None


def _find_machine(value: Any) -> dict | None:
    """The first ``machine`` record anywhere in a results JSON document."""
    if isinstance(value, dict):
        if isinstance(value.get("machine"), dict):
            return value["machine"]
        children = value.values()
    elif isinstance(value, list):
        children = value
    else:
        return None
    for child in children:
        found = _find_machine(child)
        if found is not None:
            return found
    return None


def _machine_line(path: Path) -> str:
    json_path = path.with_suffix(".json")
    if not json_path.is_file():
        if path.suffix == ".txt" and path.read_text().startswith("#"):
            return "the machine is named in the file's header (its first line)"
        return "the file does not record the machine"
    try:
        machine = _find_machine(json.loads(json_path.read_text()))
    except ValueError:
        return "the file does not record the machine"
    if machine is None:
        return ("the file does not record the machine (it was made on this project's "
                "2-core CPU machine, no GPU, as the Results overview says)")
    parts = []
    for key in ("cpu_model", "cpus", "nproc", "platform", "python", "jax", "jax_backend"):
        if machine.get(key) not in (None, ""):
            parts.append(f"{key} {machine[key]}")
    versions = machine.get("versions")
    if isinstance(versions, dict):
        parts.append(", ".join(f"{k} {v}" for k, v in versions.items()))
    devices = machine.get("devices") or machine.get("jax_devices")
    if devices:
        parts.append("devices " + ", ".join(map(str, devices)))
    where = "recorded in this file" if json_path == path else f"recorded in `{json_path.name}`"
    return f"machine {where}: " + "; ".join(parts)


def _listing() -> str:
    lines = [
        "# All result files",
        "",
        "Every file committed under `benchmarks/results/`, as committed: which script",
        "made it, the machine it records, and the file itself (text and small JSON files",
        "are shown here, plots drawn, every file linked for download). This page is",
        "generated when the site is built, so it always lists exactly the committed files.",
        "[Benchmarks](benchmarks.md) and [Decision-transformer results](dt.md) explain",
        "what the numbers mean.",
        "",
    ]
    for path in result_files():
        link = f"files/{_name(path)}"
        lines += [f"## `{_name(path)}`", "",
                  f"Source: {_source(_name(path))}; {_machine_line(path)}.", "",
                  f"[Download `{path.name}`]({link}) ({path.stat().st_size:,} bytes)", ""]
        if path.suffix == ".png":
            lines += [f"![{path.name}]({link})", ""]
        elif path.suffix == ".txt":
            lines += ["````text", path.read_text().rstrip("\n"), "````", ""]
        elif path.suffix == ".json" and path.stat().st_size <= INLINE_JSON_BYTES:
            body = path.read_text().rstrip("\n").splitlines()
            lines += ['??? abstract "Contents"', "", "    ````json",
                      *(f"    {line}" for line in body), "    ````", ""]
        elif path.suffix == ".json":
            lines += ["(Too large to show here; the `.txt` file of the same run, where there is",
                      "one, is its printed summary.)", ""]
    return "\n".join(lines) + "\n"


@event_priority(100)  # before mkdocs-jupyter turns .ipynb files into pages
def on_files(files: Files, config) -> Files:
    for path in notebook_files():
        # An ordinary file whose source folder is the repository root (mkdocs-jupyter
        # wraps it, and reads it through abs_src_path).
        files.append(File(f"notebooks/{path.name}", src_dir=str(ROOT), dest_dir=config.site_dir,
                          use_directory_urls=config.use_directory_urls))
    unknown = []
    for path in result_files():
        if _source(_name(path)) is None:
            unknown.append(_name(path))
        files.append(File.generated(config, f"{RESULTS_URI}/{_name(path)}",
                                    abs_src_path=str(path)))
    for name in unknown:
        log.warning("benchmarks/results/%s: no entry in SOURCES (docs/_ext/hooks.py) says "
                    "which script made it; add one, and describe it in docs/results/", name)
    files.append(File.generated(config, LISTING_URI, content=_listing()))
    return files
