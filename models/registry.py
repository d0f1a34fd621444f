"""Finding a model by name: the built-ins, a Hugging Face architecture (``hf:llama``,
``models/hf.py``), or a user's ``pkg.mod:attr`` / ``file.py:attr``; and its args set."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib
import importlib.util
import os
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from autotune.config.train_config import did_you_mean
from autotune.contract.spec import ModelSpec, is_user_code
from autotune.core.errors import AutotuneError, ModelLoadError
from autotune.core.files import regular_file_size

from .hf import HF_PREFIX, hf_model  # transformers is imported by hf_model, not here

__all__ = [
    "HF_PREFIX",
    "builtin_names",
    "get_model",
    "is_user_code",
    "list_models",
    "load_model",
    "parse_model_args",
    "register",
    "source_file",
    "source_sha256",
]

# A user's model file (file.py:attr) is Python source: anything this large is not one.
MAX_MODEL_FILE_BYTES = 64 * 2**20

# name -> zero-argument factory; filled by the model modules at import (see _load_builtins)
_BUILTINS: dict[str, Callable[[], ModelSpec]] = {}
_loaded = False


def register(name: str, factory: Callable[[], ModelSpec]) -> None:
    _BUILTINS[name] = factory


def _load_builtins() -> None:
    # Not "if _BUILTINS": importing one model module directly registers only its sizes.
    global _loaded
    if _loaded:
        return
    _loaded = True
    # Importing each module registers its sizes.
    for module in ("mu", "gpt", "pointer_gen", "text_regressor"):
        try:
            importlib.import_module(f"{__package__}.{module}")
        except ModuleNotFoundError as exc:  # a module not written yet
            if exc.name != f"{__package__}.{module}":
                raise


def builtin_names() -> list[str]:
    _load_builtins()
    return list(_BUILTINS)


def list_models() -> list[ModelSpec]:
    return [get_model(name) for name in builtin_names()]


def get_model(name: str) -> ModelSpec:
    _load_builtins()
    if name not in _BUILTINS:
        raise ModelLoadError(
            f"unknown model {name!r}{did_you_mean(name, list(_BUILTINS))}; built-in models: "
            f"{', '.join(_BUILTINS)}; a Hugging Face architecture as hf:NAME (hf:llama); "
            "or your own as pkg.module:attr or path/to/file.py:attr"
        )
    return dataclasses.replace(_BUILTINS[name](), source=name)


def load_model(ref: str, args: Mapping[str, Any] | None = None) -> ModelSpec:
    """A built-in name, ``hf:<architecture>`` (or ``hf:path/to/config.json``), ``pkg.module:attr``
    or ``path/to/file.py:attr``; with ``args``, those arguments of it set (a built-in's or a
    user spec's constructor arguments, ``spec.args``; an ``hf:`` model's config fields).
    A name it does not have is a ``ModelLoadError`` (exit 2) naming the ones it has.

    For user code, ``attr`` is a ``ModelSpec`` or a zero-argument callable returning one."""
    if not isinstance(ref, str):
        raise ModelLoadError(
            f"load_model: the model must be a name or reference such as 'mu', "
            f"'my_model.py:spec' or 'hf:gpt2', got {type(ref).__name__}"
        )
    if args is not None and not isinstance(args, Mapping):
        raise ModelLoadError(
            f"load_model: args must be a mapping of argument names to values (such as "
            f"{{'n_layers': 4}}), got {type(args).__name__}"
        )
    if ref.startswith(HF_PREFIX):
        return hf_model(ref, args)
    spec = _load(ref)
    if not args:
        return spec
    unknown = [name for name in args if name not in spec.args]
    if unknown:
        have = ", ".join(spec.args) or "none"
        raise ModelLoadError(
            f"model {ref!r} has no argument {', '.join(map(repr, unknown))}"
            f"{did_you_mean(unknown[0], list(spec.args))} (its arguments: {have})"
        )
    # a word where the model takes a number (n_layers=abc) would fail in every trial's
    # build; said once here instead
    wrong = [
        f"{name}={value!r} (a number, like its default {spec.args[name]!r})"
        for name, value in args.items()
        if isinstance(value, str) and isinstance(spec.args[name], int | float)
    ]
    if wrong:
        raise ModelLoadError(f"model {ref!r}: argument {'; '.join(wrong)}")
    return spec.with_args(**args)


def load_within(
    ref: str, seconds: float | None, load: Callable[[], ModelSpec], *, limit: str
) -> ModelSpec:
    """``load()``, the model ``ref`` names, stopped after ``seconds`` (the command's
    ``limit``, in words) with what to change: a user's module that waits at import (a
    sleep, a download that hangs) would otherwise outlast any --timeout. No bound without
    ``seconds``."""
    from autotune.core.signals import time_bound

    builtin = ref in builtin_names()  # its import is quick: the limit is what is short

    def too_long() -> AutotuneError:
        within = f"model {ref!r} did not load within {limit} ({seconds:g} s)"
        if builtin:
            return AutotuneError(f"{within}: give a longer --timeout")
        return AutotuneError(
            f"{within}: its module waits or works at import; make the import quick "
            "(build the model in its build function), or give a longer --timeout"
        )

    with time_bound(seconds, too_long):
        return load()


def parse_model_args(items: Sequence[str]) -> dict[str, Any]:
    """``--model-arg NAME=VALUE`` texts as a mapping, each value a YAML scalar as ``--set``
    reads it (``4``, ``3e-4``, ``true``, ``silu``); ``UsageError`` listing every bad one."""
    from autotune.config.overrides import parse_value
    from autotune.core.errors import UsageError

    parsed: dict[str, Any] = {}
    problems = []
    for item in items:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            problems.append(f"{item!r}: expected NAME=VALUE, e.g. hidden_size=256")
        else:
            parsed[name] = parse_value(raw.strip())
    if problems:
        raise UsageError("--model-arg " + "; ".join(problems))
    return parsed


def _load(ref: str) -> ModelSpec:
    """``load_model``'s built-in name or user reference, as the reference gives it.

    Whatever the user's code does while it is imported or called (raise, ``sys.exit``) is
    a ``ModelLoadError`` naming the file or module, the function and a fix; only Ctrl-C
    passes through. A built-in (C) function is refused before it is called: none returns
    a ModelSpec, and some (``os:abort``) end the process before anything can report it.
    """
    if ":" not in ref:
        return get_model(ref)
    target, _, attr = ref.rpartition(":")
    if not target or not attr:
        raise ModelLoadError(f"cannot read model reference {ref!r}: expected module:attr")
    try:
        with _exit_refused():
            is_file = _is_file_ref(target)
            module = _import_file(target, ref) if is_file else _import_module(target, ref)
            if not hasattr(module, attr):
                raise ModelLoadError(f"{target!r} has no attribute {attr!r} (from {ref!r})")
            spec = _resolve_spec(getattr(module, attr), ref)
    except _ExitCalled as exc:
        raise ModelLoadError(
            f"loading {ref!r} (importing {target!r}, then {attr!r}) called {exc}, which ends "
            "the process before it returns a model spec: "
            f"{_import_fix(SystemExit(exc.code))}"
        ) from None
    return dataclasses.replace(spec, source=ref)


class _ExitCalled(BaseException):
    """User code called ``os._exit(code)`` while its model spec was loaded (which would end
    autotune at once, with no message and, for 0, a success code)."""

    def __init__(self, code: Any, where: str) -> None:
        super().__init__(f"os._exit({code!r}){where}")
        self.code = code


@dataclasses.dataclass
class _ExitPatch:
    """``os._exit``'s replacement while user models load, one for every thread loading."""

    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    loads: int = 0  # the loads under way
    real: Callable[[int], NoReturn] = os._exit
    patched: list[Any] = dataclasses.field(default_factory=list)  # the modules replaced in


_exit_patch = _ExitPatch()


@contextlib.contextmanager
def _exit_refused() -> Iterator[None]:
    """While a user's model is imported and its spec made, ``os._exit`` in this process
    raises ``_ExitCalled`` instead of ending it (a process forked meanwhile still
    exits for real). Checked in process: a child that imported the file first would cost
    ~3 s per command (torch) and run the user's import code twice. Loads in several
    threads at once share one replacement: the first installs it, the last gives the
    real ``os._exit`` back (each used to give back what it found, maybe another's)."""
    patch = _exit_patch
    with patch.lock:
        if patch.loads == 0:
            real = os._exit
            owner = os.getpid()

            @functools.wraps(real)  # still reads as the built-in os._exit (see _resolve_spec)
            def refuse(code: int) -> NoReturn:
                if os.getpid() != owner:
                    real(code)
                frames = [f for f in traceback.extract_stack()[:-1] if f.filename != __file__]
                where = f" [{Path(frames[-1].filename).name}:{frames[-1].lineno}]" if frames else ""
                raise _ExitCalled(code, where)

            posix = sys.modules.get("posix") or sys.modules.get("nt")
            patch.real = real
            patch.patched = [
                m for m in (os, posix) if m is not None and getattr(m, "_exit", None) is real
            ]
            for module in patch.patched:
                setattr(module, "_exit", refuse)  # noqa: B010 (typed modules lack _exit)
        patch.loads += 1
    try:
        yield
    finally:
        with patch.lock:
            patch.loads -= 1
            if patch.loads == 0:
                for module in patch.patched:
                    setattr(module, "_exit", patch.real)  # noqa: B010


def _import_fix(exc: BaseException) -> str:
    """What to do about an exception raised while a user's model module was imported."""
    if isinstance(exc, SystemExit):
        return (
            "a model file must not exit when imported: keep script code under "
            "`if __name__ == '__main__':`"
        )
    return "fix the error at that line (or install the package it imports)"


def _import_file(target: str, ref: str) -> Any:
    """The module of the user's file ``target`` (``ref`` is how the user named it)."""
    from autotune.core.errors import describe_exception

    path = Path(target).expanduser()
    regular_file_size(  # by the one rule for a user's path: a FIFO, a device, a folder named
        path,
        what="model file",
        error=lambda message: ModelLoadError(f"{message} (from {ref!r})"),
        limit=MAX_MODEL_FILE_BYTES,
        advice="a model file is Python source",
    )
    module_name = f"autotune_user_model_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ModelLoadError(f"cannot import {str(path)!r} as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(module_name, None)
        if isinstance(exc, KeyboardInterrupt | _ExitCalled | AutotuneError):
            raise
        raise ModelLoadError(
            f"importing {str(path)!r} failed: {describe_exception(exc)}; " + _import_fix(exc)
        ) from exc
    return module


def _import_module(target: str, ref: str) -> Any:
    """The importable module ``target`` (``ref`` is how the user named it)."""
    from autotune.core.errors import describe_exception

    try:
        return importlib.import_module(target)
    except ImportError as exc:
        raise ModelLoadError(f"cannot import module {target!r} (from {ref!r}): {exc}") from exc
    except (KeyboardInterrupt, _ExitCalled, AutotuneError):
        raise
    except BaseException as exc:
        raise ModelLoadError(
            f"importing module {target!r} (from {ref!r}) failed: "
            f"{describe_exception(exc)}; " + _import_fix(exc)
        ) from exc


# The references whose function this thread is calling (_resolve_spec): another thread may
# load the same model meanwhile.
_calling = threading.local()


def _resolve_spec(obj: Any, ref: str) -> ModelSpec:
    """``obj`` (a module's attribute) as a ``ModelSpec``: itself, or what calling it gives."""
    import inspect

    from autotune.core.errors import describe_exception

    target, _, attr = ref.rpartition(":")
    if inspect.isbuiltin(inspect.unwrap(obj)):
        raise ModelLoadError(
            f"{ref!r} is the built-in function {getattr(obj, '__qualname__', attr)}, not an "
            "autotune ModelSpec; name a ModelSpec or a zero-argument function returning one "
            "(see examples/my_model.py)"
        )
    if callable(obj) and not isinstance(obj, ModelSpec):
        calling: set[str] = _calling.__dict__.setdefault("refs", set())
        if ref in calling:  # autotune's own main() named as a model: each call ran the CLI
            raise ModelLoadError(
                f"calling {ref!r} to get a model spec asked for {ref!r} again (it runs "
                "autotune itself?); name a ModelSpec or a zero-argument function returning one"
            )
        calling.add(ref)
        try:
            obj = obj()
        except (KeyboardInterrupt, _ExitCalled, AutotuneError):
            raise
        except BaseException as exc:
            raise ModelLoadError(
                f"calling {ref!r} to get a model spec failed: {describe_exception(exc)}; "
                f"fix {attr}() in {target!r}: it must return an autotune ModelSpec when "
                "called with no arguments"
            ) from exc
        finally:
            calling.discard(ref)
    if not isinstance(obj, ModelSpec):
        raise ModelLoadError(
            f"{ref!r} is a {type(obj).__name__}, not an autotune ModelSpec (or a "
            "zero-argument callable returning one)"
        )
    return obj


def _is_file_ref(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


def source_file(ref: str) -> Path | None:
    """The file whose code ``ref`` runs: the named file for ``file.py:attr``, the module's
    file for ``pkg.mod:attr`` once that module is imported; None for a built-in name or a
    module that is not imported (finding its file would import its package)."""
    if not is_user_code(ref):
        return None
    target = ref.rpartition(":")[0]
    if _is_file_ref(target):
        return Path(target).expanduser().resolve()
    module = sys.modules.get(target)
    origin = getattr(module, "__file__", None)
    return Path(origin).resolve() if origin else None


def source_sha256(ref: str) -> str | None:
    """SHA-256 of :func:`source_file`'s bytes, or None where there is no such file."""
    path = source_file(ref)
    if path is None or not path.is_file():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()
