"""`autotune train` through the real Typer app: presets, flags, bad input, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_lm import FAKE_LM
from typer.testing import CliRunner, Result

from autotune.cli.main import app
from autotune.config.train_config import TrainConfig
from autotune.machine.hardware import probe
from autotune.preset import (
    Fingerprint,
    Measured,
    ModelRef,
    Preset,
    Task,
    TrainingDefaults,
    save_preset,
)

runner = CliRunner()


pytestmark = pytest.mark.usefixtures("one_thread")


QUICK = ["--max-steps", "2", "--eval-interval", "2", "--set", "config.seq_len=16"]
TINY = ["--model", f"{FAKE_LM}:spec", "--set", "config.micro_batch=2"]


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)


def invoke(*args: str) -> Result:
    return runner.invoke(app, ["train", *args])


def write_preset(path: Path, **changes: object) -> Path:
    fields: dict[str, object] = {
        "name": "tiny-test",
        "model": ModelRef(name=f"{FAKE_LM}:spec", args={"dim": 8}),
        "task": Task(seq_len=16, global_batch=4),
        "config": TrainConfig(micro_batch=2, grad_accum=2, seq_len=16),
        "fingerprint": Fingerprint.from_profile(probe(), "cpu"),
        "measured": Measured(tokens_per_s=1000.0),
        "training": TrainingDefaults(max_steps=2, eval_interval=2, eval_batches=1, log_interval=1),
    }
    fields.update(changes)
    return save_preset(Preset(**fields), path)  # type: ignore[arg-type]


def test_train_with_a_preset_into_the_default_folder(tmp_path: Path) -> None:
    preset = write_preset(tmp_path / "tiny.yaml")
    result = invoke("--preset", str(preset), "--trust-model")
    assert result.exit_code == 0, result.output
    out = tmp_path / "autotune_runs" / "train" / "tiny-test"
    assert (out / "ckpt-step00000002.pt").is_file() and (out / "tokenizer.json").is_file()
    assert "micro_batch 2 x grad_accum 2 = global batch 4" in result.output
    assert "step 2/2" in result.output and "val loss" in result.output
    # the same command again would overwrite the run: refused, with what to do instead
    again = invoke("--preset", str(preset), "--trust-model")
    assert again.exit_code == 2 and "--resume auto" in again.output
    more = invoke("--preset", str(preset), "--trust-model", "--resume", "auto", "--max-steps", "3")
    assert more.exit_code == 0, more.output
    assert "resumed from" in more.output and "step 3/3" in more.output


@pytest.mark.parametrize(
    ("sets", "warned"),
    [(["config.micro_batch=1"], True), (["config.micro_batch=1", "config.grad_accum=4"], False)],
)
def test_a_set_that_changes_a_presets_global_batch_says_so(
    tmp_path: Path, sets: list[str], warned: bool
) -> None:
    """``--set config.micro_batch=7`` turned the searched global batch of 32 into 7 without
    a word; one that keeps it (a micro-batch and its accumulation together) says nothing."""
    preset = write_preset(tmp_path / "tiny.yaml")
    flags = [arg for s in sets for arg in ("--set", s)]
    result = invoke("--preset", str(preset), "--trust-model", "--max-steps", "1", *flags)
    assert result.exit_code == 0, result.output
    said = "--set changes the global batch from 4 to 2 samples a step" in result.output
    assert said is warned


def test_a_preset_this_device_cannot_run_is_refused(tmp_path: Path) -> None:
    preset = write_preset(
        tmp_path / "fp16.yaml",
        config=TrainConfig(micro_batch=2, grad_accum=2, seq_len=16, precision="fp16"),
    )
    result = invoke("--preset", str(preset))
    assert result.exit_code == 2
    assert "fp16" in result.output and "Traceback" not in result.output


def test_model_without_preset_and_json_logs(tmp_path: Path) -> None:
    result = invoke(*TINY, *QUICK, "--out", "run", "--json-logs", "--lr", "0.01")
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert {r["type"] for r in records} == {"train", "eval"}
    assert records[-1]["step"] == 2
    assert (tmp_path / "run" / "metrics.jsonl").is_file()
    assert "documents" in result.stderr  # people's messages go to stderr


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--data", "missing.txt"], "does not exist"),
        (["--data", "empty.txt"], "empty"),
        (["--data", "binary.txt"], "looks binary"),
        (["--data", "bad.jsonl"], "not valid JSON"),
        (["--set", "config.micro_batc=2"], "did you mean 'micro_batch'"),
        (["--set", "training.warmup_steps=-1"], "training.warmup_steps"),
        (["--on-oom", "retry"], "--on-oom"),
        (["--max-steps", "0"], "--max-steps"),
        (["--max-steps", str(2**64)], f"--max-steps: expected an integer of at most {2**63 - 1}"),
        (["--eval-interval", str(2**63)], "--eval-interval: expected an integer of at most"),
        (["--resume", "nope.pt"], "does not exist"),
    ],
)
def test_bad_input_is_exit_2_without_traceback(tmp_path: Path, args: list[str], match: str) -> None:
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "binary.txt").write_bytes(b"\x7fELF\x00\x00")
    (tmp_path / "bad.jsonl").write_text('{"text": 1\n')
    result = invoke(*TINY, *QUICK, *args)
    assert result.exit_code == 2, result.output
    assert match in result.output
    assert "Traceback" not in result.output


def test_a_preset_naming_user_code_runs_it_only_with_consent(tmp_path: Path) -> None:
    model_file = tmp_path / "planted.py"
    marker = tmp_path / "ran.txt"
    model_file.write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"
        f"from fake_lm import make_spec as spec\n"
    )
    ref = f"{model_file}:spec"
    preset = write_preset(tmp_path / "shared.yaml", model=ModelRef(name=ref, args={"dim": 8}))
    refused = invoke("--preset", str(preset))
    assert refused.exit_code == 2, refused.output
    assert "user code" in refused.output and "--trust-model" in refused.output
    assert "Traceback" not in refused.output
    assert not marker.exists()  # opening the preset ran none of its code
    other = invoke("--preset", str(preset), "--model", "mu")
    assert other.exit_code == 2 and "is not the preset's model" in other.output
    assert not marker.exists()
    allowed = invoke("--preset", str(preset), "--model", ref, "--out", "a")
    assert allowed.exit_code == 0, allowed.output
    assert marker.exists() and f"running user code from {model_file}" in allowed.output
    trusted = invoke("--preset", str(preset), "--trust-model", "--out", "b")
    assert trusted.exit_code == 0, trusted.output


def test_a_changed_model_file_is_a_warning_and_a_missing_one_an_error(tmp_path: Path) -> None:
    model_file = tmp_path / "mine.py"
    model_file.write_text("from fake_lm import make_spec as spec\n")
    ref = f"{model_file}:spec"
    recorded = ModelRef(name=ref, args={"dim": 8}, sha256="0" * 64)
    preset = write_preset(tmp_path / "mine.yaml", model=recorded)
    changed = invoke("--preset", str(preset), "--trust-model")
    assert changed.exit_code == 0, changed.output
    assert "has changed since this preset was searched" in changed.output
    model_file.unlink()
    missing = invoke("--preset", str(preset), "--trust-model", "--out", "again")
    assert missing.exit_code == 2 and "does not exist" in missing.output
    assert "Traceback" not in missing.output


def test_neither_preset_nor_model() -> None:
    result = invoke()
    assert result.exit_code == 2 and "--preset" in result.output


def test_pointer_gen_without_data_explains_the_format() -> None:
    result = invoke("--model", "pointer-gen", "--max-steps", "1")
    assert result.exit_code == 2
    assert '{"source"' in result.output and "--data" in result.output


# -- the run folder and its disk -------------------------------------------------------------


def test_out_naming_a_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("not a folder")
    result = invoke(*TINY, *QUICK, "--out", "taken")
    assert result.exit_code == 2, result.output
    assert "cannot use 'taken' as the run folder: it is a file; give --out a" in result.output
    assert "Traceback" not in result.output
    assert (tmp_path / "taken").read_text() == "not a folder"


def test_resume_auto_with_only_corrupt_checkpoints_says_so(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "ckpt-step00000002.pt").write_bytes(b"not a checkpoint")
    result = invoke(*TINY, *QUICK, "--out", "run", "--resume", "auto")
    assert result.exit_code == 2, result.output
    assert "none of the 1 checkpoint(s)" in result.output and "nothing to resume" in result.output
    assert "continue it with --resume auto" not in result.output  # no advice that loops
    assert (run_dir / "ckpt-step00000002.pt").read_bytes() == b"not a checkpoint"


def test_a_full_disk_at_a_checkpoint_keeps_the_last_good_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from autotune.train import run_folder

    real_save = run_folder.save_checkpoint
    calls: list[Path] = []

    def save_then_fill_the_disk(state: dict[str, object], path: Path) -> int:
        calls.append(path)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(state, path)

    monkeypatch.setattr(run_folder, "save_checkpoint", save_then_fill_the_disk)
    sets = ["--set", "training.checkpoint_interval=1", "--max-steps", "3"]
    result = invoke(*TINY, *QUICK, *sets, "--out", "run")
    assert result.exit_code == 1, result.output
    assert "cannot write checkpoint" in result.output and "No space left" in result.output
    assert "the last good checkpoint" in result.output and "--resume auto" in result.output
    assert "Traceback" not in result.output
    assert [p.name for p in sorted((tmp_path / "run").glob("ckpt-step*.pt"))] == [
        "ckpt-step00000001.pt"
    ]


def test_a_user_loss_that_raises_mid_training_is_exit_2_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "bad_loss.py"
    bad.write_text(
        "import dataclasses\nfrom fake_lm import make_spec\n\n"
        "def _loss(model, batch):\n    raise ValueError('labels out of range')\n\n"
        "spec = dataclasses.replace(make_spec(), loss_fn=_loss)\n"
    )
    result = invoke("--model", f"{bad}:spec", "--set", "config.micro_batch=2", *QUICK)
    assert result.exit_code == 2, result.output
    assert "its loss_fn failed: ValueError: labels out of range [bad_loss.py:5 in _loss]" in (
        result.output
    )
    assert "Traceback" not in result.output


def test_a_resume_with_another_seed_is_exit_2_saying_how_to_go_on(tmp_path: Path) -> None:
    assert invoke(*TINY, *QUICK, "--out", "run").exit_code == 0
    before = {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir() if p.is_file()}
    again = ["--out", "run", "--resume", "auto", "--max-steps", "4"]
    result = invoke(*TINY, *QUICK, *again, "--set", "training.seed=5")
    assert result.exit_code == 2, result.output
    assert "training.seed is 0 in the checkpoint and 5 in this run" in result.output
    assert "--set training.seed=0" in result.output and "--out" in result.output
    assert "Traceback" not in result.output
    after = {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir() if p.is_file()}
    assert after == before


def test_a_folder_of_another_models_checkpoints_is_not_offered_to_resume(
    tmp_path: Path,
) -> None:
    assert invoke(*TINY, *QUICK, "--out", "run").exit_code == 0  # fake-lm, dim 16
    preset = write_preset(tmp_path / "tiny.yaml")  # fake-lm, dim 8
    result = invoke("--preset", str(preset), "--trust-model", "--out", "run")
    assert result.exit_code == 2, result.output
    assert "model 'fake-lm'" in result.output and "dim" in result.output
    assert "--resume" not in result.output and "new folder with --out" in result.output
