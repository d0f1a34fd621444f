"""``autotune.tune(...)``: search a model defined in a notebook or a script, no spec file.

``tune`` wraps the functions it is given into a ``ModelSpec`` and runs
``autotune.study.search`` on it. Each trial runs in its own process, which must get
those functions: they are serialized *by value* with cloudpickle (a function or class
defined in ``__main__`` or a notebook cell, a lambda, a closure), while functions of an
importable module travel by reference and are imported in the trial, which searches the
calling process's ``sys.path`` too. Whatever they use must be picklable (a dataset is
copied into each trial: keep it small, or give a function that opens the real data).
"""

from __future__ import annotations

import hashlib
import inspect
import os
import sys
import tempfile
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core.errors import UsageError
from autotune.core.validator import SIZE, show

if TYPE_CHECKING:
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import Batch, ModelSpec
    from autotune.preset.sections import Preset
    from autotune.study import SearchResult

__all__ = ["TuneResult", "model_fingerprint", "model_spec", "tune"]


@dataclass(frozen=True)
class TuneResult:
    """What ``tune`` found: the winner's ``preset`` and the whole ``search`` result."""

    preset: Preset
    search: SearchResult

    @property
    def config(self) -> TrainConfig:
        return self.preset.config

    @property
    def speedup(self) -> float | None:
        """Verified throughput over the naive config's, measured in the same study."""
        return self.search.speedup


class _ByValue:
    """A callable that pickles its function by value (cloudpickle), so a trial process
    can rebuild a function defined in a notebook or a script's ``__main__``."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        import cloudpickle

        # What cloudpickle keeps by reference (a module's functions) the trial imports:
        # from the folders this process imports from (a script's own, a notebook's).
        return (_from_bytes, (cloudpickle.dumps(self.fn), list(sys.path)))

    def __repr__(self) -> str:
        return f"{getattr(self.fn, '__qualname__', self.fn)!r}"


def _from_bytes(data: bytes, paths: list[str]) -> _ByValue:
    import pickle

    sys.path.extend(p for p in paths if p not in sys.path)  # after the trial's own
    return _ByValue(pickle.loads(data))  # cloudpickle's output is read by plain pickle


class _Build:
    """``build_fn(**args, activation_checkpointing=...)`` from the user's ``build()``."""

    def __init__(self, build: Callable[..., nn.Module], checkpointing: bool) -> None:
        self.build = _ByValue(build)
        self.checkpointing = checkpointing

    def __call__(self, **kwargs: Any) -> nn.Module:
        if not self.checkpointing:
            kwargs.pop("activation_checkpointing", None)
        return self.build(**kwargs)


class _RowsOf:
    """``make_batch_fn`` from one example batch: ``batch_size`` of its rows, drawn with
    the trial's generator (a dict of batch-first tensors)."""

    def __init__(self, example: Batch) -> None:
        self.example = dict(example)
        self.rows = next(iter(self.example.values())).shape[0]

    def __call__(
        self, args: Mapping[str, Any], batch_size: int, seq_len: int, gen: torch.Generator
    ) -> Batch:
        import torch

        index = torch.randint(0, self.rows, (batch_size,), generator=gen)
        return {k: v[index] for k, v in self.example.items()}


class _SamplesOf:
    """``make_batch_fn`` from a dataset: ``batch_size`` samples, collated."""

    def __init__(self, data: Callable[..., Any]) -> None:
        self.data = data

    def __call__(
        self, args: Mapping[str, Any], batch_size: int, seq_len: int, gen: torch.Generator
    ) -> Batch:
        import torch
        from torch.utils.data import default_collate

        from autotune.contract.spec import data_parts

        dataset, collate = data_parts(self.data(args, seq_len), "tune")
        index = torch.randint(0, len(dataset), (batch_size,), generator=gen).tolist()
        batch: Batch = (collate or default_collate)([dataset[i] for i in index])
        return batch


class _Data:
    """``data_fn(args, seq_len)`` returning the user's dataset (or DataLoader)."""

    def __init__(self, source: Any) -> None:
        self.source = source if callable(source) and not _is_data(source) else None
        self.fixed = None if self.source is not None else source

    def __call__(self, args: Mapping[str, Any], seq_len: int) -> Any:
        if self.source is not None:
            return self.source()
        return self.fixed


class _Loss:
    def __init__(self, loss: Callable[..., torch.Tensor]) -> None:
        self.loss = _ByValue(loss)

    def __call__(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return self.loss(model, batch)


class _SixN:
    """Training FLOPs per sample when none are given: 6 x parameters (a dense model)."""

    def __init__(self, build: _Build) -> None:
        self.build = build
        self.params: int | None = None

    def __call__(self, args: Mapping[str, Any], seq_len: int) -> float:
        if self.params is None:
            import torch

            with torch.device("meta"):
                module = self.build(**args)
            self.params = sum(p.numel() for p in module.parameters())
        return 6.0 * self.params


# -- the model's identity -------------------------------------------------------------------

_PLAIN = (int, float, complex, str, bytes, bool, type(None))
_LIBRARIES = {"torch", "numpy", "autotune", *sys.stdlib_module_names}  # named, not read


def model_fingerprint(*parts: Any) -> str:
    """8 hex digits that name the code of ``parts`` (functions, classes, example batches):
    the same in every run of the same code, different once a function's body, a constant
    it holds or a function it calls in its own module changes. Line numbers, comments and
    the values of tensors are left out (an example batch counts by its keys, shapes and
    dtypes), so a random example batch or a moved function keeps its study."""
    digest = hashlib.sha256()
    seen: set[int] = set()
    for part in parts:
        digest.update(_identity(part, seen).encode())
        digest.update(b"\0")
    return digest.hexdigest()[:8]


def _identity(obj: Any, seen: set[int]) -> str:
    """A text that stands for ``obj``'s code (see ``model_fingerprint``)."""
    if isinstance(obj, _PLAIN):
        return repr(obj)
    module = getattr(obj, "__module__", None)
    if isinstance(obj, (type, types.FunctionType)) and str(module).split(".")[0] in _LIBRARIES:
        return f"{module}.{obj.__qualname__}"
    if id(obj) in seen:
        return "<seen>"
    seen.add(id(obj))
    if isinstance(obj, types.CodeType):
        consts = ",".join(_identity(c, seen) for c in obj.co_consts)
        return f"code({obj.co_code.hex()};{consts};{obj.co_names};{obj.co_varnames})"
    if isinstance(obj, (tuple, list)):
        return "[" + ",".join(_identity(x, seen) for x in obj) + "]"
    if isinstance(obj, Mapping):
        return "{" + ",".join(f"{k!r}:{_identity(v, seen)}" for k, v in obj.items()) + "}"
    if isinstance(obj, _ByValue):
        return _identity(obj.fn, seen)
    if isinstance(obj, types.MethodType):
        return _identity(obj.__func__, seen)
    if isinstance(obj, types.FunctionType):
        return _function_identity(obj, seen)
    if isinstance(obj, type):
        body = {k: v for k, v in vars(obj).items() if not k.startswith("__") or k == "__init__"}
        bases = [b.__qualname__ for b in obj.__mro__[1:]]
        return f"class {obj.__qualname__}({bases}){_identity(body, seen)}"
    shape = getattr(obj, "shape", None)
    if shape is not None and hasattr(obj, "dtype"):  # a tensor or an array: not its values
        return f"tensor({tuple(shape)},{obj.dtype})"
    return f"{type(obj).__module__}.{type(obj).__qualname__}:{_identity(type(obj), seen)}"


def _function_identity(fn: types.FunctionType, seen: set[int]) -> str:
    """A function's code, its defaults and closure, and the functions and classes of its
    own module that it names (what it calls)."""
    cells = [c.cell_contents for c in fn.__closure__ or () if _filled(c)]
    called = [
        fn.__globals__[name]
        for name in fn.__code__.co_names
        if callable(fn.__globals__.get(name))
        and getattr(fn.__globals__[name], "__module__", None) == fn.__module__
    ]
    return (
        f"def {fn.__qualname__}{_identity(fn.__code__, seen)}"
        f"{_identity([fn.__defaults__, fn.__kwdefaults__, cells, called], seen)}"
    )


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
    except ValueError:
        return False
    return True


def _is_data(obj: Any) -> bool:
    from torch.utils.data import DataLoader, Dataset

    return isinstance(obj, (DataLoader, Dataset))


def _takes_checkpointing(build: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(build).parameters
    except (TypeError, ValueError):
        return False
    return "activation_checkpointing" in params


MAX_NAME = 100  # characters of a model's name: it names the study and its folder


def _check_batch(batch: Mapping[Any, Any]) -> None:
    """``UsageError`` naming each entry of an example batch that is not a tensor with a
    batch dimension, or whose rows differ from the first entry's (each trial draws rows)."""
    import torch

    problems = []
    rows: int | None = None
    for key, value in batch.items():
        if not isinstance(value, torch.Tensor) or value.dim() == 0:
            kind = "a 0-d tensor" if isinstance(value, torch.Tensor) else type(value).__name__
            problems.append(f"{key!r} is {kind}, not a tensor with a batch dimension")
        elif rows is None:
            rows = value.shape[0]
        elif value.shape[0] != rows:
            problems.append(f"{key!r} has {value.shape[0]} rows where the first entry has {rows}")
    if problems:
        raise UsageError(
            "tune: batch= must be a dict of batch-first tensors: " + "; ".join(problems)
        )


def _check_sizes(*, name: Any, global_batch: Any, size: Any, size_name: Any) -> None:
    """``UsageError`` naming every argument of ``model_spec`` that is not of its kind."""
    problems = []
    if not isinstance(name, str) or not name.strip():
        problems.append(f"name= must be a non-empty text, got {show(name)}")
    elif len(name) > MAX_NAME:  # the study's folder is named after it (OSError at 5,000)
        problems.append(f"name= must be at most {MAX_NAME} characters, got {len(name)}")
    for key, value in (("global_batch", global_batch), ("size", size)):
        if wanted := SIZE.wanted(value):  # the bound of a batch or a length
            problems.append(f"{key}= must be {wanted}, got {show(value)}")
    if not isinstance(size_name, str) or not size_name.isidentifier():
        problems.append(f"size_name= must be a short name such as 'image', got {size_name!r}")
    if problems:
        raise UsageError("tune: " + "; ".join(problems))


def model_spec(
    *,
    build: Callable[..., nn.Module],
    loss: Callable[[nn.Module, Batch], torch.Tensor],
    batch: Batch | None = None,
    dataloader: DataLoader[Any] | Dataset[Any] | Callable[[], Any] | None = None,
    name: str = "tuned-model",
    global_batch: int = 32,
    size: int = 1,
    size_name: str = "size",
    flops: Callable[[], float] | None = None,
) -> ModelSpec:
    """The ``ModelSpec`` ``tune`` searches: ``build()`` makes the module (it is called
    with ``activation_checkpointing=`` where it takes that argument), ``loss(model,
    batch)`` returns the scalar loss, and the data is an example ``batch`` (a dict of
    batch-first tensors whose rows are drawn) or ``dataloader`` (a Dataset, a DataLoader
    whose dataset and ``collate_fn`` are used, or a zero-argument function returning
    one). Throughput is in samples/s; ``size`` is the sample's size, named ``size_name``
    (``image`` 224, ``seq`` 512) in the preset's notes; ``flops()``: one sample's
    training FLOPs (default 6 x parameters)."""
    from autotune.contract.spec import ModelSpec

    if (batch is None) == (dataloader is None):
        raise UsageError("tune: give exactly one of batch= (an example batch) or dataloader=")
    _check_sizes(name=name, global_batch=global_batch, size=size, size_name=size_name)
    if not callable(build) or not callable(loss):
        raise UsageError("tune: build= and loss= must be functions")
    checkpointing = _takes_checkpointing(build)
    build_fn = _Build(build, checkpointing)
    data_fn = None
    if batch is not None:
        if not isinstance(batch, Mapping) or not batch:
            raise UsageError(
                f"tune: batch= must be a dict of batch-first tensors, got {type(batch).__name__}"
            )
        _check_batch(batch)
        make_batch_fn: Any = _ByValue(_RowsOf(batch))
    else:
        data_fn = _ByValue(_Data(dataloader))
        make_batch_fn = _SamplesOf(data_fn)
    flops_fn: Any = _SixN(build_fn) if flops is None else _ByValue(lambda args, n: flops())
    return ModelSpec(
        name=name,
        description=f"{name}, given to autotune.tune()",
        task="custom",
        build_fn=build_fn,
        make_batch_fn=make_batch_fn,
        loss_fn=_Loss(loss),
        flops_fn=flops_fn,
        args={},
        seq_len=size,
        max_seq_len=size,
        global_batch=global_batch,
        supports_checkpointing=checkpointing,
        throughput_unit="samples",
        data_fn=data_fn,
        size_name=size_name,
        # names the study (opening.py): changed code searches afresh, not the old trials
        extras={"fingerprint": model_fingerprint(build, loss, batch, dataloader, flops)},
    )


def tune(
    *,
    build: Callable[..., nn.Module],
    loss: Callable[[nn.Module, Batch], torch.Tensor],
    budget: str | int,
    batch: Batch | None = None,
    dataloader: DataLoader[Any] | Dataset[Any] | Callable[[], Any] | None = None,
    device: str | None = None,
    name: str = "tuned-model",
    global_batch: int = 32,
    size: int = 1,
    size_name: str = "size",
    flops: Callable[[], float] | None = None,
    output: str | Path | None = "best.yaml",
    **search_kwargs: Any,
) -> TuneResult:
    """Search the fastest config of a model given as functions, within a memory ``budget``
    on ``device``; returns the winner's ``preset`` and the ``search`` result.

    ``build``, ``loss``, ``batch``/``dataloader``, ``size``, ``size_name`` and ``flops``:
    see ``model_spec``. With ``dataloader``, every trial reads the real pipeline, so the
    DataLoader workers, pinning and prefetch are measured on it (its own batch size and
    worker settings are replaced by each trial's). ``output``: the preset file to write
    (None: none). Other keyword arguments are ``autotune.search``'s option fields
    (``trials``, ``timeout``, ``knobs``, ``study``, ``storage``, ``runs_dir``, ...: see
    ``autotune/study/session/options.py``).

    The preset names the model ``name``, which ``autotune train`` cannot load: train with
    ``autotune.train.loop.PresetLoop`` or export the preset for your trainer.
    """
    from autotune.preset import load_preset
    from autotune.study import search, search_options

    if "model" in search_kwargs:
        raise UsageError("tune: give build=, loss= and batch=/dataloader=, not model=")
    spec = model_spec(
        build=build,
        loss=loss,
        batch=batch,
        dataloader=dataloader,
        name=name,
        global_batch=global_batch,
        size=size,
        size_name=size_name,
        flops=flops,
    )
    with tempfile.TemporaryDirectory(prefix="autotune-tune-") as scratch:
        # the path as given: Path() would drop the slash of "x.yaml/", which names a folder
        target = Path(scratch) / "best.yaml" if output is None else os.fspath(output)
        options = search_options(device=device, output=target, **search_kwargs)
        result = search(spec, budget=budget, **options)
        preset = load_preset(target)
    if output is None:
        from dataclasses import replace

        result = replace(result, preset_path=None)
    return TuneResult(preset=preset, search=result)
