"""Checks the workspace file's tables share: the ``name`` of a ``[[server]]``, ``[[train]]``,
``[[process]]`` and ``[[dataset]]``, and the ``gpus`` list of a ``[[server]]`` and a ``[[train]]``:
the same rule, the same words."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from backend.regen.catalog import DatasetConfig
from backend.sglang.config import ServerConfig
from backend.train.config import TrainRunConfig
from backend.workspace import ProcessConfig

NAME_RULE = "use letters, digits, '.', '_' or '-' (at most 64), starting with a letter or digit"


def _server(gpus):
    return ServerConfig.model_validate({"name": "srv", "model_path": "/m", "gpus": gpus})


def _train(gpus):
    return TrainRunConfig.model_validate({"name": "run", "target_model": "/m", "train_data": "d.jsonl",
                                          "gpus": gpus})


@pytest.mark.parametrize("make", [_server, _train], ids=["server", "train"])
@pytest.mark.parametrize(("gpus", "reason"), [
    ([0, -1], "GPU indices are 0 or more"),
    ([2, 3, 2], "a GPU is listed twice"),
])
def test_bad_gpu_lists_are_refused_with_the_reason(make, gpus, reason):
    with pytest.raises(ValidationError) as e:
        make(gpus)
    (err,) = e.value.errors()
    assert err["loc"] == ("gpus",) and reason in err["msg"]


@pytest.mark.parametrize("make", [_server, _train], ids=["server", "train"])
def test_a_good_gpu_list_is_kept_in_order(make):
    assert make([3, 0, 1]).gpus == [3, 0, 1]


def test_an_empty_training_list_says_to_list_one_or_leave_it_out():
    with pytest.raises(ValidationError, match="list at least one GPU, or leave gpus out"):
        _train([])


def _named(kind: str, name: str):
    fields = {
        "server": (ServerConfig, {"model_path": "/m"}),
        "train": (TrainRunConfig, {"target_model": "/m", "train_data": "d.jsonl"}),
        "process": (ProcessConfig, {"argv": ["true"]}),
        "dataset": (DatasetConfig, {"source": "hf", "file": "d.jsonl"}),
    }
    cls, rest = fields[kind]
    return cls.model_validate({"name": name, **rest})


KINDS = ["server", "train", "process", "dataset"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["-lead", "has space", "x" * 65, "", "a/b"])
def test_a_bad_name_is_refused_with_the_rule(kind, name):
    with pytest.raises(ValidationError) as e:
        _named(kind, name)
    (err,) = e.value.errors()
    assert err["loc"] == ("name",) and NAME_RULE in err["msg"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["a", "Llama-3.1_8B", "9" + "x" * 63])
def test_a_good_name_is_kept(kind, name):
    assert _named(kind, name).name == name
