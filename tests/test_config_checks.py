"""The ``gpus`` list of a ``[[server]]`` and of a ``[[train]]`` table: the same checks, the same words."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from backend.sglang.config import ServerConfig
from backend.train.runconfig import TrainRunConfig


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
