"""One torch.compile cache for a search's trials, its race and the training run after it.

Each burst is a fresh process, so a compiled config pays Inductor's compilation in every
burst unless the compiled code is found on disk. Inductor keeps it in
``$TORCHINDUCTOR_CACHE_DIR`` (default: a folder under the system's temporary directory,
which a reboot or a tmp cleaner empties). A search and ``autotune train`` point it at
``<runs dir>/compile-cache`` instead, unless the user set it: a config compiled in a trial
loads its code in the race and in the training run (mu, bf16, compile: 58 s to compile
cold, 5.6 s from the cache, measured on the 2-core Xeon).

Importing ``torch._dynamo`` writes torch's default folder into the environment (its disk
cache asks for the folder at import), so a process that has checked compile support
holds ``TORCHINDUCTOR_CACHE_DIR`` without anyone having chosen it: that value is torch's
default, not the user's choice, and the runs folder's is used instead.

Inductor's precompiled C++ header (which every CPU kernel includes) is kept in the same
folder (``keep_precompiled_headers``), not under the temporary folder a burst removes. So
is what Inductor's check of the CPU's vector instruction sets found
(``trust_vector_isa_check``), which every compiling process ran again.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import platform
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "CACHE_ENV",
    "compile_cache_at",
    "compile_cache_dir",
    "keep_precompiled_headers",
    "shared_compile_cache",
    "check_user_cache",
    "torch_default_dir",
    "trust_vector_isa_check",
]

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
HEADERS = "precompiled_headers"
VECTOR_ISA_FILE = "autotune-vector-isa.json"  # in the compile cache


def compile_cache_dir(runs_dir: str | Path) -> Path:
    return Path(runs_dir) / "compile-cache"


@contextlib.contextmanager
def shared_compile_cache(runs_dir: str | Path) -> Iterator[Path]:
    """Point Inductor's cache (this process and the bursts it starts) at the runs
    folder's for the duration; a cache the user chose (the variable set) is kept."""
    before = os.environ.get(CACHE_ENV)
    if before and not _torchs_default(before):
        check_user_cache()
        yield Path(before)
        return
    folder = compile_cache_dir(runs_dir).resolve()
    with compile_cache_at(folder):
        yield folder


def check_user_cache() -> None:
    """A UsageError naming ``$TORCHINDUCTOR_CACHE_DIR`` where it names something that is
    not a folder (``/dev/null`` failed every burst's build with ``FileExistsError``)."""
    folder = os.environ.get(CACHE_ENV)
    if not folder or _torchs_default(folder):
        return
    path = Path(folder).expanduser()
    if path.exists() and not path.is_dir():
        from autotune.core.errors import UsageError

        raise UsageError(
            f"{CACHE_ENV}={folder!r} is not a folder: Inductor keeps its compiled code "
            f"there; point it at a folder, or unset it (autotune then keeps the cache in "
            "its runs folder)"
        )


@contextlib.contextmanager
def compile_cache_at(folder: str | Path) -> Iterator[None]:
    """Inductor's cache (this process and the bursts it starts) at ``folder`` for the
    duration, the variable as it was after."""
    before = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(folder)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = before


def torch_default_dir() -> str:
    """Where Inductor caches when nobody chose (torch's own rule, which follows the
    temporary folder)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid_{os.getuid()}"
    return os.path.join(
        tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user)
    )


def _torchs_default(folder: str) -> bool:
    """Whether ``folder`` is torch's default (which torch itself puts in the environment
    on ``import torch._dynamo``)."""
    return os.path.abspath(folder) == os.path.abspath(torch_default_dir())


def keep_precompiled_headers() -> None:
    """Keep Inductor's precompiled C++ header in the compile cache (``$TORCHINDUCTOR_CACHE_DIR``,
    beside the code it serves) for the rest of this process.

    Inductor puts the header under its default folder, which follows the temporary folder
    at the moment ``torch._inductor.codecache`` is imported. A burst's temporary folder is
    its own and removed with it (``burst.process.use_as_tmpdir``), so every compiled burst
    built the header again, on a cache hit too: mu's cached compile took 7.6-9.4 s in a
    burst and 3.9 s in a process whose temporary folder lasts (2-core EPYC; Inductor's
    ``compile_file`` 5.1-5.6 s against 0.2 s). The setting is torch's private one: a torch
    without it keeps the header where it puts it (slower, never wrong); so does a process
    with no cache folder set."""
    folder = os.environ.get(CACHE_ENV)
    if not folder:
        return
    from torch._inductor import codecache

    if not hasattr(codecache, "_HEADER_DIR") or not hasattr(codecache, "_HEADER_LOCK_DIR"):
        return
    headers = os.path.join(folder, HEADERS)
    codecache._HEADER_DIR = headers
    codecache._HEADER_LOCK_DIR = os.path.join(headers, "locks")


def trust_vector_isa_check() -> None:
    """Spare this process Inductor's check of the CPU's vector instruction sets where a
    process of the same compile cache, torch and compiler found every set the CPU claims
    usable.

    Before a CPU compile, Inductor checks each vector ISA the CPU claims (AVX2, AVX-512,
    AMX...) by building a test library and loading it in a child Python, in every process
    that compiles: about 1 s of each compiled burst, a cached compile included (mu's on
    the 2-core Xeon with AMX: 1.8 s instead of 2.8 s). The first process here runs the
    check as torch does and writes what it found beside the cache; when every claimed set
    passed, the later ones tell Inductor so (its ``cpp.vec_isa_ok``) instead of checking
    again, and pick the same set. The extra checks some sets make (AMX's tile permission,
    AVX-512's bf16) still run. Nothing changes where a set failed, where the user set
    ``TORCHINDUCTOR_VEC_ISA_OK``, off x86, with no cache folder set, or on a torch without
    these private names: Inductor checks as before."""
    folder = os.environ.get(CACHE_ENV)
    if not folder or platform.machine() not in ("x86_64", "AMD64"):
        return
    try:
        import torch
        from torch._inductor import config, cpp_builder, cpu_vec_isa

        if config.cpp.vec_isa_ok is not None:
            return
        on_cpu = cpu_vec_isa.x86_isa_checker()
        claimed = [
            str(isa)
            for isa in cpu_vec_isa.supported_vec_isa_list
            if all(flag in on_cpu for flag in str(isa).split())
        ]
        key: dict[str, object] = {
            "torch": torch.__version__,
            "compiler": cpp_builder.get_cpp_compiler(),
            "claimed": claimed,
        }
        record = Path(folder) / VECTOR_ISA_FILE
        found = _vector_isa_found(record, key)
        if found is None:
            found = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()]
            _write_vector_isa_found(record, key, found)
    except Exception:  # torch's private names moved: Inductor checks as it always did
        return
    if claimed and found == claimed:
        config.cpp.vec_isa_ok = True


def _vector_isa_found(path: Path, key: dict[str, object]) -> list[str] | None:
    """The sets a check found, as written for ``key``; None: no such record."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("key") != key:
        return None
    found = record.get("found")
    return found if isinstance(found, list) else None


def _write_vector_isa_found(path: Path, key: dict[str, object], found: list[str]) -> None:
    from autotune.core.files import atomic_write_text

    with contextlib.suppress(OSError):
        atomic_write_text(path, json.dumps({"key": key, "found": found}))
