"""Put first on PYTHONPATH of the serving environment's python by tests/bench/test_run.py, so that
``python -m sglang.benchmark.serving`` (or ``sglang.bench_serving``), run exactly as production
runs it, can be imported on a machine without torchvision: the same stand-in for the missing
package as tests/sim/bench_serving_main.py, installed only for those two modules."""

import importlib.util
import sys

_MODULES = ("sglang.benchmark.serving", "sglang.bench_serving")


def _install() -> None:
    argv = list(getattr(sys, "orig_argv", []))
    if not any(a in _MODULES for a in argv) or importlib.util.find_spec("torchvision") is not None:
        return
    from pathlib import Path

    stand_in = Path(__file__).resolve().parents[2] / "sim" / "bench_serving_main.py"
    spec = importlib.util.spec_from_file_location("_bench_serving_stand_in", stand_in)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from transformers.utils import import_utils

    if import_utils.is_torchvision_available():  # transformers decides once: let it see the truth first
        raise SystemExit("transformers reports torchvision although it cannot be found")
    sys.meta_path.append(module._AbsentTorchvision())


_install()
