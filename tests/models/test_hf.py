"""Hugging Face architectures by name (models/hf.py): tiny configs (2 layers, hidden 32,
vocabulary 128) built with random weights and nothing downloaded, one real optimizer step
through the engine's step, FLOPs against a hand count, the preset's round trip with no
--trust-model, and the one-paragraph refusal where transformers is missing.

transformers is an optional extra: the tests that need it skip with a reason without it;
the refusal's tests simulate its absence and run everywhere.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from fake_presets import make_config, make_preset
from typer.testing import CliRunner

from autotune.cli.main import app
from autotune.config.checks import check_config
from autotune.config.train_config import TrainConfig
from autotune.core.errors import ModelLoadError, UsageError
from autotune.engine.step import Stepper, make_optimizer, prepare_model
from autotune.models.registry import is_user_code, load_model, parse_model_args
from autotune.preset import ModelRef, load_preset, save_preset
from autotune.preset.export import export_preset, torchrun_command
from autotune.testing.fake_caps import cpu_caps

LLAMA = {
    "vocab_size": 128,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
}
GPT2 = {"vocab_size": 128, "n_embd": 32, "n_layer": 2, "n_head": 4}
BERT = {**LLAMA, "intermediate_size": 64}
CPU = cpu_caps()
runner = CliRunner()


@pytest.fixture
def hf() -> Any:
    return pytest.importorskip(
        "transformers", reason='hf: models need transformers (pip install "autotune-train[hf]")'
    )


def llama(**changes: Any) -> Any:
    return load_model("hf:llama", {**LLAMA, **changes})


# -- what a reference gives ------------------------------------------------------------------


def test_a_tiny_llama_is_a_causal_lm_with_its_own_knobs(hf: Any) -> None:
    spec = llama()
    assert (spec.name, spec.source, spec.task, spec.family) == ("hf:llama", "hf:llama", "lm", "hf")
    assert spec.args == LLAMA and spec.max_seq_len == 2048 and spec.seq_len == 256
    assert spec.supports_checkpointing and not is_user_code(spec.source)
    assert spec.knob("attn_implementation").values[:2] == ("sdpa", "eager")
    assert spec.knob("checkpoint_every").values == (1, 2)
    assert spec.extras["hf"] == {
        "model_type": "llama",
        "head": "causal-lm",
        "class": "LlamaForCausalLM",
    }


def test_each_head_by_default_and_by_choice(hf: Any) -> None:
    assert load_model("hf:gpt2", GPT2).extras["hf"]["head"] == "causal-lm"
    bert = load_model("hf:bert", BERT)
    assert (bert.extras["hf"]["class"], bert.task) == ("BertForMaskedLM", "custom")
    cls = bert.with_args(head="sequence-classification")
    assert cls.extras["hf"]["class"] == "BertForSequenceClassification"


def test_flops_per_token_match_a_hand_count(hf: Any) -> None:
    T, d, ff, V, L = 16, 32, 64, 128, 2
    per_layer = 4 * d * d + 3 * d * ff + 2 * d  # q, k, v, o; gate, up, down; two norms
    n = L * per_layer + d + V * d  # the final norm; the untied lm_head
    assert llama().param_counts().non_embedding == n
    assert llama().flops_per_sample(T) == 6 * n * T + 12 * L * d * T * T
    # GPT-2 ties its head to the embedding: the logits matmul counts, as the built-ins'
    gpt2 = load_model("hf:gpt2", GPT2)
    gpt2_layer = (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d) + 4 * d
    tied_n = L * gpt2_layer + 2 * d + V * d
    assert gpt2.flops_per_sample(T) == 6 * tied_n * T + 12 * L * d * T * T


def test_one_optimizer_step_through_the_engine_with_its_knobs(hf: Any) -> None:
    spec = llama()
    config = TrainConfig(
        micro_batch=2,
        grad_accum=2,
        seq_len=16,
        precision="bf16",
        activation_checkpointing=True,
        knobs={"attn_implementation": "eager", "checkpoint_every": 2},
    )
    check_config(config, spec=spec, device=CPU)
    device = torch.device("cpu")
    model = prepare_model(spec, config, device)
    assert model.config._attn_implementation == "eager"
    switch = "is_activation_checkpointing"  # transformers 5: is_gradient_checkpointing before
    on = getattr(model, switch) if hasattr(model, switch) else model.is_gradient_checkpointing
    assert on and not model.config.use_cache
    before = model.model.layers[0].mlp.down_proj.weight.detach().clone()
    stepper = Stepper(
        model, make_optimizer(model, config), config=config, device=device, loss_fn=spec.loss_fn
    )
    gen = torch.Generator().manual_seed(0)
    out = stepper.step([spec.make_batch(batch_size=2, seq_len=16, generator=gen) for _ in "ab"])
    assert math.isfinite(out.loss) and abs(out.loss - math.log(128)) < 1.0
    assert not torch.equal(before, model.model.layers[0].mlp.down_proj.weight)


def test_the_causal_loss_reads_labels_as_the_next_tokens(hf: Any) -> None:
    spec = llama()
    model = spec.build()
    batch = spec.make_batch(batch_size=2, seq_len=8)
    assert torch.equal(batch["input_ids"][:, 1:], batch["labels"][:, :-1])
    logits = model(input_ids=batch["input_ids"]).logits
    expected = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())
    assert spec.loss(model, batch).item() == pytest.approx(expected.item(), rel=1e-6)
    # transformers' labels path would shift them again: another loss
    shifted = model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
    assert shifted.item() != pytest.approx(expected.item(), rel=1e-4)


def test_masked_and_classification_batches_use_the_models_own_loss(hf: Any) -> None:
    bert = load_model("hf:bert", BERT)
    batch = bert.make_batch(batch_size=3, seq_len=16)
    hidden = batch["labels"] != -100
    assert hidden.any(dim=1).all() and hidden.float().mean() < 0.5
    assert math.isfinite(bert.loss(bert.build(), batch).item())
    cls = bert.with_args(head="sequence-classification", num_labels=3)
    batch = cls.make_batch(batch_size=4, seq_len=8)
    assert batch["labels"].shape == (4,) and int(batch["labels"].max()) < 3
    assert math.isfinite(cls.loss(cls.build(), batch).item())


def test_with_args_makes_the_spec_again_from_the_config(hf: Any) -> None:
    short = llama().with_args(max_position_embeddings=64)
    assert short.max_seq_len == 64 and short.seq_len == 64
    assert short.args["max_position_embeddings"] == 64
    assert short.extras["fingerprint"] != llama().extras["fingerprint"]  # a study of its own


def test_a_config_json_gives_its_architecture_and_fields(hf: Any, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    data = {
        **LLAMA,
        "model_type": "llama",
        "architectures": ["LlamaForSequenceClassification"],
        "transformers_version": "4.44.0",
        "torch_dtype": "bfloat16",
        "pad_token_id": 0,
    }
    path.write_text(json.dumps(data))
    spec = load_model(f"hf:{path}", {"num_hidden_layers": 1})
    assert spec.source == "hf:llama"  # the preset names the architecture, not the file
    assert spec.args == {
        **LLAMA,
        "pad_token_id": 0,
        "head": "sequence-classification",
        "num_hidden_layers": 1,
    }
    assert next(spec.build().parameters()).dtype == torch.float32


@pytest.mark.parametrize(
    ("ref", "args", "words"),
    [
        ("hf:lama", {}, "did you mean 'llama'"),
        ("hf:llama", {"hiden_size": 64}, "did you mean 'hidden_size'"),
        ("hf:llama", {"dtype": "bfloat16"}, "--knob precision=bf16"),
        ("hf:llama", {"attn_implementation": "eager"}, "--knob attn_implementation=eager"),
        ("hf:gpt2", {"head": "masked-lm"}, "it has: causal-lm, sequence-classification"),
        ("hf:llama", {"head": "sequence-classification"}, "--model-arg pad_token_id=0"),
        ("hf:llama", {"hidden_size": 30}, "not a multiple of the number of attention heads"),
        ("hf:missing/config.json", {}, "does not exist"),
        ("hf:/dev/null", {}, "expected a regular JSON file"),
    ],
)
def test_bad_references_are_one_paragraph(hf: Any, ref: str, args: dict, words: str) -> None:
    with pytest.raises(ModelLoadError) as caught:
        load_model(ref, {**({} if ref != "hf:llama" else LLAMA), **args})
    assert words in str(caught.value) and "\n" not in str(caught.value)


# -- model args, for every model -------------------------------------------------------------


def test_model_args_are_yaml_scalars_and_checked_for_every_model() -> None:
    assert parse_model_args(["n_layers=1", "dropout=1e-1", "flag=true", "act=silu"]) == {
        "n_layers": 1,
        "dropout": 0.1,
        "flag": True,
        "act": "silu",
    }
    with pytest.raises(UsageError, match="expected NAME=VALUE"):
        parse_model_args(["n_layers"])
    assert load_model("gpt-small", {"n_layers": 1}).args["n_layers"] == 1
    with pytest.raises(ModelLoadError, match="did you mean 'n_layers'"):
        load_model("gpt-small", {"n_layer": 1})


def test_models_show_takes_model_args(hf: Any) -> None:
    words = [w for k, v in LLAMA.items() for w in ("--model-arg", f"{k}={v}")]
    result = runner.invoke(app, ["models", "show", "hf:llama", *words, "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["args"] == LLAMA and info["non_embedding_params"] == 24_736


def test_search_cli_takes_model_args_into_the_preset(
    hf: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search's flow with the bursts faked: the preset names hf:llama and the fields
    that differ from its default config."""
    import autotune.burst.supervisor
    import autotune.machine.hardware
    from autotune.testing.burst import FakeBurst, cpu_profile

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(autotune.burst.supervisor, "run_burst", FakeBurst())
    monkeypatch.setattr(autotune.machine.hardware, "probe", lambda: cpu_profile())
    words = [w for k, v in LLAMA.items() for w in ("--model-arg", f"{k}={v}")]
    result = runner.invoke(
        app, ["search", "--model", "hf:llama", *words, "--budget", "1GB", "--trials", "3"]
    )
    assert result.exit_code == 0, result.output
    preset = load_preset(tmp_path / "best.yaml")
    assert (preset.model.name, preset.model.args, preset.model.sha256) == ("hf:llama", LLAMA, None)
    assert "attn_implementation" in preset.config.knobs


def test_train_takes_model_args_for_a_bare_model_only(hf: Any, tmp_path: Path) -> None:
    from autotune.testing.burst import cpu_profile
    from autotune.train.launch import prepare_training

    run = prepare_training(model="hf:llama", model_args=LLAMA, profile=cpu_profile())
    assert run.spec.args == LLAMA and run.config.seq_len == 256
    preset = save_preset(make_preset(), tmp_path / "p.yaml")
    with pytest.raises(UsageError, match="--model-arg sets the arguments of a model trained"):
        prepare_training(
            preset=str(preset),
            model_args=LLAMA,
            profile=cpu_profile(),
            option_names={"model_args": "--model-arg"},
        )


# -- a preset of an hf: model is data --------------------------------------------------------


def test_a_preset_rebuilds_its_model_with_no_trust(hf: Any, tmp_path: Path) -> None:
    preset = make_preset(
        name="tiny-llama",
        model=ModelRef(name="hf:llama", args={**LLAMA, "num_hidden_layers": 1}),
        config=make_config(knobs={"attn_implementation": "eager"}),
    )
    loaded = load_preset(save_preset(preset, tmp_path / "tiny-llama.yaml"))
    spec = loaded.model.load(trust=False)  # no UntrustedModelError: no user code runs
    assert spec.args["num_hidden_layers"] == 1 and spec.max_seq_len == 2048
    check_config(loaded.config, spec=spec, device=CPU)  # its knob is the model's
    assert "--trust-model" not in torchrun_command(loaded, 1, preset_ref="tiny-llama.yaml")
    notes = " ".join(export_preset(loaded, "hf").unmapped)
    assert "AutoModelForCausalLM.from_config(AutoConfig.for_model('llama'" in notes
    assert "attn_implementation='eager'" in notes


# -- without transformers --------------------------------------------------------------------


@pytest.fixture
def no_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    """``import transformers`` fails, as where the extra is not installed."""
    monkeypatch.setitem(sys.modules, "transformers", None)


def test_without_transformers_load_model_says_which_extra(no_transformers: None) -> None:
    with pytest.raises(ModelLoadError) as caught:
        load_model("hf:llama", LLAMA)
    message = str(caught.value)
    assert 'pip install "autotune-train[hf]"' in message and "hf:llama" in message
    assert caught.value.exit_code == 2 and "\n" not in message


def test_without_transformers_the_cli_exits_2_with_no_traceback(no_transformers: None) -> None:
    result = runner.invoke(app, ["models", "show", "hf:gpt2"])
    assert result.exit_code == 2
    assert "autotune-train[hf]" in result.output and "Traceback" not in result.output


# -- end to end ------------------------------------------------------------------------------


@pytest.mark.slow
def test_search_then_train_the_preset_with_no_spec_and_no_trust(hf: Any, tmp_path: Path) -> None:
    """A real search of a tiny llama (bursts in their own processes), then `autotune train`
    of its preset (no --trust-model: no user code), then its hf export in transformers'
    own TrainingArguments. Slow: about a minute of bursts on a 2-core CPU."""
    import subprocess

    sizes = {**LLAMA, "vocab_size": 300}  # the byte tokenizer's 257 ids fit
    words = [w for k, v in sizes.items() for w in ("--model-arg", f"{k}={v}")]
    search = [sys.executable, "-m", "autotune", "search", "--model", "hf:llama", *words]
    search += ["--budget", "2GB", "--seq-len", "32", "--global-batch", "4", "--trials", "2"]
    search += ["--steps", "2", "--timeout", "150s", "--knob", "compile=off", "-o", "tiny.yaml"]
    done = subprocess.run(search, cwd=tmp_path, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    preset = load_preset(tmp_path / "tiny.yaml")
    assert preset.model.name == "hf:llama" and preset.model.args["vocab_size"] == 300
    train = [sys.executable, "-m", "autotune", "train", "--preset", "tiny.yaml"]
    train += ["--max-steps", "2", "--out", "run"]
    done = subprocess.run(train, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert list((tmp_path / "run").glob("ckpt-*.pt"))
    exported = export_preset(preset, "hf")
    assert exported.data is not None
    if importlib.util.find_spec("accelerate") is not None:  # TrainingArguments needs it
        args = hf.TrainingArguments(output_dir=str(tmp_path / "hf"), **exported.data)
        assert args.per_device_train_batch_size == preset.config.micro_batch
