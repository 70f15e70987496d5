"""Run SGLang's own benchmark client, ``python -m sglang.bench_serving``, in the serving environment.

Used by tests/sim/test_bench_serving.py with the serving environment's python. The client
runs unchanged, with one exception on machines without torchvision: SGLang 0.5.23 imports
torchvision at module level from its model-config package (InternVL and DeepSeek-OCR image
preprocessing), which the benchmark client pulls in through ``sglang.srt.disaggregation``.
PyPI only has CUDA builds of torchvision, which cannot load against the CPU torch of the
serving environment. A text benchmark never calls into it, so when torchvision is absent the
name resolves to an empty package whose every attribute raises ImportError when used.

Arguments are bench_serving's; several runs in one process (SGLang is slow to import) are
separated by a lone ``::``, each run going through the client's command line entry anew.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import runpy
import sys
import types


class _Absent:
    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> "_Absent":
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Absent(f"{self._name}.{attr}")

    def __call__(self, *args: object, **kwargs: object) -> None:
        raise ImportError(f"{self._name}: torchvision is not installed")

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)


class _AbsentTorchvision(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):  # noqa: ANN001 - importlib protocol
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):  # noqa: ANN001
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = lambda attr: _Absent(f"{spec.name}.{attr}")  # type: ignore[attr-defined]
        return module

    def exec_module(self, module) -> None:  # noqa: ANN001
        return None


def main() -> None:
    if importlib.util.find_spec("torchvision") is None:
        # transformers decides once whether torchvision is there; let it see the truth first.
        from transformers.utils import import_utils
        if import_utils.is_torchvision_available():
            raise SystemExit("transformers reports torchvision although it cannot be found")
        sys.meta_path.append(_AbsentTorchvision())
    runs: list[list[str]] = [[]]
    for arg in sys.argv[1:]:
        if arg == "::":
            runs.append([])
        else:
            runs[-1].append(arg)
    for args in runs:
        sys.argv = ["bench_serving", *args]
        runpy.run_module("sglang.bench_serving", run_name="__main__", alter_sys=True)
        print("=== bench_serving run finished", flush=True)


if __name__ == "__main__":
    main()
