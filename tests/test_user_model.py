"""User models: examples/my_model.py loads, trains through the one step function, and bad
references give a clear ModelLoadError."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import torch

from autotune.config.train_config import TrainConfig
from autotune.core.errors import ModelLoadError
from autotune.engine.step import Stepper, make_optimizer, prepare_model
from autotune.models import ModelSpec, load_model

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "my_model.py"


def test_the_readme_example_loads_from_a_file_and_trains() -> None:
    spec = load_model(f"{EXAMPLE}:spec")
    assert isinstance(spec, ModelSpec) and spec.name == "conv-lm"
    assert spec.source == f"{EXAMPLE}:spec"
    spec = spec.with_args(dim=16, layers=2)
    config = TrainConfig(micro_batch=4, grad_accum=2, seq_len=32)
    device = torch.device("cpu")
    torch.manual_seed(0)
    model = prepare_model(spec, config, device)
    stepper = Stepper(
        model,
        make_optimizer(model, config, lr=1e-2),
        config=config,
        device=device,
        loss_fn=spec.loss,
    )
    batches = [
        spec.make_batch(batch_size=4, seq_len=32, generator=torch.Generator().manual_seed(i))
        for i in range(2)
    ]
    losses = [stepper.step(batches).loss_value() for _ in range(20)]
    assert losses[-1] < losses[0] - 0.5, losses
    assert spec.flops_per_sample(32) > 0 and spec.tokens_per_sample(32) == 32


def _write_package(root: Path, body: str) -> None:
    pkg = root / "my_models_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "zoo.py").write_text(textwrap.dedent(body))


def test_a_module_reference_and_a_factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_package(
        tmp_path,
        f"""
        import importlib.util
        _s = importlib.util.spec_from_file_location("_example", {str(EXAMPLE)!r})
        _m = importlib.util.module_from_spec(_s)
        _s.loader.exec_module(_m)
        spec = _m.spec
        def factory():
            return _m.spec.with_args(layers=1)
        not_a_spec = 42
        def broken():
            raise RuntimeError("no weights here")
        """,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = load_model("my_models_pkg.zoo:spec")
    assert spec.name == "conv-lm" and spec.source == "my_models_pkg.zoo:spec"
    made = load_model("my_models_pkg.zoo:factory")
    assert made.args["layers"] == 1
    with pytest.raises(ModelLoadError, match=r"is a int, not an autotune ModelSpec"):
        load_model("my_models_pkg.zoo:not_a_spec")
    with pytest.raises(
        ModelLoadError, match=r"calling 'my_models_pkg.zoo:broken'.*no weights here"
    ):
        load_model("my_models_pkg.zoo:broken")
    with pytest.raises(ModelLoadError, match=r"has no attribute 'nope'"):
        load_model("my_models_pkg.zoo:nope")
    sys.modules.pop("my_models_pkg.zoo", None)
    sys.modules.pop("my_models_pkg", None)


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("missing/model_file.py:spec", r"model file .*model_file.py.* does not exist"),
        ("no_such_package_xyz.models:spec", r"cannot import module 'no_such_package_xyz.models'"),
        ("not-a-model", r"unknown model 'not-a-model'.*built-in models: .*mu"),
        ("gpt-smal", r"did you mean 'gpt-small'"),
        (":spec", r"expected module:attr"),
    ],
)
def test_bad_references_are_clear_errors(ref: str, message: str) -> None:
    with pytest.raises(ModelLoadError, match=message):
        load_model(ref)


def test_a_file_that_fails_to_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad_model.py"
    bad.write_text("import torch\nraise ImportError('needs flash_attn')\n")
    with pytest.raises(
        ModelLoadError, match=r"importing .*bad_model.py.* failed: ImportError: needs"
    ) as info:
        load_model(f"{bad}:spec")
    assert info.value.exit_code == 2  # a usage error, not a crash


def test_a_file_with_a_syntax_error_names_its_line(tmp_path: Path) -> None:
    """The place is the file's line, not the importlib frame that compiled it."""
    bad = tmp_path / "bad_model.py"
    bad.write_text("import torch\ndef spec(:\n    pass\n")
    with pytest.raises(ModelLoadError) as info:
        load_model(f"{bad}:spec")
    assert "failed: SyntaxError: invalid syntax [bad_model.py:2]; fix" in str(info.value)
    assert "frozen" not in str(info.value)


def test_the_code_a_reference_runs_is_named_and_hashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib

    from autotune.models.registry import is_user_code, source_file, source_sha256

    assert not is_user_code("mu") and source_file("mu") is None and source_sha256("mu") is None
    model_file = tmp_path / "mine.py"
    model_file.write_text("x = 1\n")
    ref = f"{model_file}:spec"
    assert is_user_code(ref) and source_file(ref) == model_file.resolve()
    assert source_sha256(ref) == hashlib.sha256(b"x = 1\n").hexdigest()
    assert source_sha256(f"{tmp_path / 'gone.py'}:spec") is None
    _write_package(tmp_path, "spec = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("my_models_pkg", "my_models_pkg.zoo"):  # another test may have imported it
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert source_file("my_models_pkg.zoo:spec") is None  # not imported: not looked for
    try:
        __import__("my_models_pkg.zoo")
        zoo = tmp_path / "my_models_pkg" / "zoo.py"
        assert source_file("my_models_pkg.zoo:spec") == zoo.resolve()
    finally:  # the next test writes its own my_models_pkg
        for name in ("my_models_pkg.zoo", "my_models_pkg"):
            sys.modules.pop(name, None)


# -- user code that raises or exits is a ModelLoadError, never a silent exit --------------
EXITS = """
import sys
sys.exit(0)
"""


def test_a_file_that_exits_at_import(tmp_path: Path) -> None:
    bad = tmp_path / "exits_model.py"
    bad.write_text(EXITS)
    with pytest.raises(ModelLoadError) as info:
        load_model(f"{bad}:spec")
    message = str(info.value)
    assert "exits_model.py" in message and "it called sys.exit(0)" in message
    assert "if __name__ == '__main__'" in message  # the fix
    assert info.value.exit_code == 2


def test_a_package_that_raises_at_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_package(tmp_path, "raise RuntimeError('no GPU driver')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        ModelLoadError,
        match=r"importing module 'my_models_pkg.zoo' .*RuntimeError: no GPU driver "
        r"\[zoo.py:1 in <module>\]",
    ):
        load_model("my_models_pkg.zoo:spec")
    sys.modules.pop("my_models_pkg", None)


def test_a_factory_that_exits(tmp_path: Path) -> None:
    bad = tmp_path / "factory_model.py"
    bad.write_text("import sys\ndef make():\n    sys.exit(3)\n")
    with pytest.raises(ModelLoadError) as info:
        load_model(f"{bad}:make")
    message = str(info.value)
    assert "it called sys.exit(3) [factory_model.py:3 in make]" in message
    assert "fix make()" in message and "called with no arguments" in message


@pytest.mark.parametrize("ref", ["sys:exit", "os:getpid", "os:_exit"])
def test_a_builtin_function_is_refused_without_being_called(ref: str) -> None:
    # No C function returns a ModelSpec, and some (os:abort, os:_exit) end the process
    # when called: refused unseen (os:abort itself: tests/cli/test_user_model_cli.py).
    with pytest.raises(ModelLoadError, match=r"is the built-in function .*not an autotune"):
        load_model(ref)


def test_ctrl_c_in_user_code_is_not_swallowed(tmp_path: Path) -> None:
    bad = tmp_path / "interrupted_model.py"
    bad.write_text("raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        load_model(f"{bad}:spec")


def test_a_seq2seq_models_encode_example_that_raises_is_named(tmp_path: Path) -> None:
    """A user seq2seq model's ``encode_example`` runs under ``user_code`` too, and once
    before training (not first in a DataLoader worker): its error names it, exit 2."""
    import dataclasses
    import json

    from autotune.data import load_data
    from autotune.models import get_model

    def encode_example(src: list[str], tgt: list[str], vocab: object, **kw: int) -> dict:
        raise ValueError("no <unk> in my vocabulary")

    builtin = get_model("pointer-gen")
    spec = dataclasses.replace(
        builtin,
        source=f"{tmp_path / 'my_s2s.py'}:spec",
        extras={**builtin.extras, "encode_example": encode_example},
    )
    pairs = tmp_path / "pairs.jsonl"
    rows = [{"source": f"the story number {i} is long", "summary": f"story {i}"} for i in range(9)]
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ModelLoadError, match="its encode_example failed") as caught:
        load_data(spec, pairs, seq_len=12)
    assert "my_s2s.py" in str(caught.value) and "no <unk>" in str(caught.value)
    assert "\n" not in str(caught.value)  # one paragraph


OLD_PATH_MODEL = """
import torch
from torch import nn
from autotune.models.spec import Knob, ModelSpec

spec = ModelSpec(
    name="old-path", description="written against autotune.models.spec", task="lm",
    build_fn=lambda **args: nn.Linear(2, 2), make_batch_fn=lambda a, b, s, g: {},
    loss_fn=lambda m, b: torch.zeros(()), flops_fn=lambda a, s: 1.0, args={}, seq_len=4,
    max_seq_len=4, global_batch=4, knobs=(Knob(name="k", values=(1, 2), default=1),),
)
"""


def test_a_model_file_written_against_the_removed_module_path_loads_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``autotune.models.spec`` moved to ``autotune.contract.spec``: user files in the
    wild import the old path, which stays an alias that names the new one."""
    import autotune.contract.spec

    monkeypatch.delitem(sys.modules, "autotune.models.spec", raising=False)  # warn again
    path = tmp_path / "old_model.py"
    path.write_text(OLD_PATH_MODEL)
    with pytest.warns(DeprecationWarning, match=r"autotune\.contract\.spec") as caught:
        spec = load_model(f"{path}:spec")
    assert "from autotune import ModelSpec" in str(caught[0].message)
    assert isinstance(spec, ModelSpec) and spec.name == "old-path"  # the same class
    assert sys.modules["autotune.models.spec"] is autotune.contract.spec


def test_a_word_for_a_numeric_model_argument_is_refused_at_load() -> None:
    # otherwise every trial's build fails on it ("'str' object cannot be interpreted as an
    # integer") and the search ends with nothing measured
    with pytest.raises(ModelLoadError, match=r"n_layers='abc' \(a number, like its default 6\)"):
        load_model("mu", {"n_layers": "abc"})
    assert load_model("mu", {"n_layers": 2, "label_smoothing": 0}).args["n_layers"] == 2
