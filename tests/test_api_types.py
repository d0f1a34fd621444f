"""The public API given a value of the wrong type: an ``AutotuneError`` that names the
argument and what it takes (exit 2 at the CLI's boundary), never an AttributeError or a
TypeError from deep inside (found by a hostile-input round)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import autotune
from autotune.core.errors import AutotuneError
from autotune.study import search_options

_PRESET = autotune.load_preset(Path(__file__).parents[1] / "presets" / "cpu" / "mu-epyc.yaml")
_HERE = autotune.probe()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: autotune.search(None, budget="1GB"), "model must be a model's name"),
        (lambda: autotune.search(123, budget="1GB"), "got int"),
        (lambda: autotune.search(torch.nn.Linear(2, 2), budget="1GB"), "autotune.tune()"),
        (lambda: autotune.load_model(None), "load_model: the model must be a name"),
        (lambda: autotune.load_model("mu", 5), "args must be a mapping"),
        (lambda: autotune.load_model("mu", ["n_layers"]), "got list"),
        (lambda: autotune.load_preset(5), "load_preset: expected the preset file's path"),
        (lambda: autotune.load_preset(b"p.yaml"), "got bytes"),
        (lambda: search_options(since=math.nan), "since must be a time.monotonic() reading"),
        (lambda: search_options(since=math.inf), "(a finite number) or None, got inf"),
        (lambda: search_options(worker="yes"), "worker must be true or false, got 'yes'"),
        (lambda: search_options(study=5), "study must be a text, got 5"),
        (lambda: search_options(storage=5), "storage must be a text, got 5"),
        (lambda: search_options(output=5), "output must be a path (a str or os.PathLike) or None"),
        (lambda: search_options(warm_start=5), "warm_start must be a preset's path"),
        (lambda: search_options(hardware="x"), "hardware must be a HardwareProfile"),
        (lambda: search_options(watch="yes"), "watch must be true, false, a MachineWatch"),
        (lambda: autotune.probe(cpuinfo_text=5), "probe: cpuinfo_text must be the text of"),
        (lambda: autotune.check_portability("best.yaml", None), "preset must be a Preset"),
        (lambda: autotune.check_portability(_PRESET, None), "profile must be a HardwareProfile"),
        (lambda: autotune.check_portability(_PRESET, _HERE, device=0), "device must be a str"),
        (lambda: autotune.check_portability(_PRESET, _HERE, force="no"), "force must be True"),
        (lambda: autotune.save_preset(_PRESET, None), "save_preset: expected the file's path"),
        (lambda: autotune.save_preset(_PRESET, "x\0.yaml"), "no NUL character"),
        (lambda: autotune.save_preset({"a": 1}, "o.yaml"), "save_preset: expected a Preset"),
        (lambda: autotune.PresetLoop("best.yaml"), "PresetLoop.from_preset"),
    ],
)
def test_a_wrong_type_is_an_autotune_error_naming_the_argument(
    call: Callable[[], Any], message: str
) -> None:
    with pytest.raises(AutotuneError) as refused:
        call()
    assert message in str(refused.value)


def test_a_path_like_output_is_a_path(tmp_path: Path) -> None:
    class Where:  # an os.PathLike that is no pathlib.Path
        def __fspath__(self) -> str:
            return str(tmp_path / "best.yaml")

    assert search_options(output=Where(), warm_start=Where())["output"] is not None


def test_a_search_refuses_a_malformed_rank_before_any_burst(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # each burst read RANK in its own process and crashed
    monkeypatch.setenv("RANK", "abc")
    with pytest.raises(AutotuneError, match="RANK='abc' is not a whole number"):
        autotune.search("mu", budget="1GB", **search_options(trials=1))


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:7"])
def test_a_preset_loop_on_cuda_without_cuda_is_refused_at_once(device: str) -> None:
    # accepted, then prepare() failed with "Torch not compiled with CUDA enabled"
    with pytest.raises(AutotuneError, match="torch sees no CUDA device on this machine"):
        autotune.PresetLoop(_PRESET.config, device=device)


def test_a_preset_loop_on_a_cuda_index_past_the_devices_names_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(
        AutotuneError, match=r"torch sees 2 CUDA device\(s\) here \(cuda:0 to cuda:1\)"
    ):
        autotune.PresetLoop(_PRESET.config, device="cuda:7")
