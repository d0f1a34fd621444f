"""Data: the default corpus, the user's formats, bad data, the token cache, datasets."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from fake_lm import make_spec

import autotune.core.files
import autotune.data.corpus
from autotune.burst import trial_batches
from autotune.config.train_config import TrainConfig
from autotune.core.errors import DataError
from autotune.data import (
    Document,
    LMDataset,
    ResumableSampler,
    default_corpus,
    load_data,
    load_documents,
    loader_kwargs,
    prepare_lm_data,
    prepare_regression_data,
    prepare_seq2seq_data,
    split_validation,
    unigram_entropy,
)
from autotune.data.loader import worker_init
from autotune.data.tokenizer import ByteTokenizer, WordVocab, load_tokenizer, split_words
from autotune.engine.distributed import DistInfo
from autotune.train.batches import BatchStream


def lm(path: Path | None, cache: Path, seq_len: int = 8, vocab_size: int = 260) -> object:
    return prepare_lm_data(path, seq_len=seq_len, vocab_size=vocab_size, cache_dir=cache)


# -- the default corpus ---------------------------------------------------------------------


def test_default_corpus_is_python_docs_split_into_sections() -> None:
    docs = default_corpus()
    assert len(docs) > 100  # ~79 topics, split at their section headings
    assert all(d.text.strip() for d in docs)
    assert any("assert" in d.text for d in docs)


def test_validation_split_is_deterministic_and_disjoint() -> None:
    docs = default_corpus()
    train1, val1 = split_validation(docs)
    _, val2 = split_validation(list(docs))
    assert [d.source for d in val1] == [d.source for d in val2]
    assert 0 < len(val1) < len(docs) / 4
    assert {d.source for d in train1}.isdisjoint(d.source for d in val1)
    assert len(train1) + len(val1) == len(docs)


def test_a_single_document_that_hashes_into_val_still_trains(tmp_path: Path) -> None:
    for i in range(1000):  # find a name whose hash falls in the validation split
        doc = Document(source=str(tmp_path / f"doc{i}.txt"), text="abcdefgh" * 60)
        many = [doc, *(Document(source=f"other{j}", text="x") for j in range(50))]
        if doc in split_validation(many)[1]:
            break
    else:  # pragma: no cover
        raise AssertionError("no name hashed into the validation split")
    assert split_validation([doc]) == ([doc], [])  # it all trains; the preparer holds a tail
    path = tmp_path / f"doc{i}.txt"
    path.write_text(doc.text)
    data = prepare_lm_data(path, seq_len=16, vocab_size=260, cache_dir=tmp_path / "c")
    assert len(data.train) > 0 and len(data.val) > 0  # type: ignore[arg-type]


def test_default_corpus_tokenizes_with_stats(tmp_path: Path) -> None:
    data = prepare_lm_data(None, seq_len=64, vocab_size=260, cache_dir=tmp_path)
    stats = data.stats
    assert stats is not None
    assert stats.documents == stats.train_documents + stats.val_documents
    assert stats.train_tokens > 10 * stats.val_tokens / 2 > 0
    assert stats.min_doc_tokens <= stats.avg_doc_tokens <= stats.max_doc_tokens
    assert stats.train_chunks == (stats.train_tokens - 1) // 64
    assert any("documents" in line for line in data.summary)


# -- the user's text -----------------------------------------------------------------------


def test_text_file_folder_and_jsonl(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello world, " * 20)
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "b.md").write_text("# title\nmarkdown " * 10)
    (sub / "skip.bin").write_bytes(b"\x00\x01")  # not *.txt/*.md: ignored
    docs = load_documents(tmp_path)
    assert sorted(Path(d.source).name for d in docs) == ["a.txt", "b.md"]
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text(json.dumps({"text": "one"}) + "\n\n" + json.dumps({"text": "two"}) + "\n")
    assert [d.text for d in load_documents(jsonl)] == ["one", "two"]


def test_long_document_is_chunked_not_truncated(tmp_path: Path) -> None:
    text = "".join(chr(97 + i % 26) for i in range(1000))
    (tmp_path / "long.txt").write_text(text)
    data = prepare_lm_data(tmp_path / "long.txt", seq_len=16, vocab_size=260, cache_dir=tmp_path)
    assert data.stats is not None
    # one document: the validation split is the tail of the stream; every token is kept
    assert data.stats.train_tokens + data.stats.val_tokens == 1001  # + <eos>
    train = data.train
    assert isinstance(train, LMDataset)
    assert len(train) == (data.stats.train_tokens - 1) // 16
    first, second = train[0], train[1]
    assert first["input_ids"].shape == (16,)
    assert torch.equal(first["labels"][:-1], first["input_ids"][1:])  # next-token labels
    assert first["labels"][-1] == second["input_ids"][0]  # stride seq_len: no token lost
    decoded = ByteTokenizer().decode(torch.cat([first["input_ids"], second["input_ids"]]).tolist())
    assert decoded == text[:32]


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("empty.txt", b"", "empty"),
        ("blank.txt", b"  \n\n ", "empty"),
        ("binary.txt", b"abc\x00\x01\x02", "binary"),
        ("latin1.txt", "caf\xe9".encode("latin-1"), "not UTF-8"),
        ("bad.jsonl", b'{"text": "ok"}\n{not json\n', r"bad.jsonl:2: not valid JSON"),
        ("list.jsonl", b"[1, 2]\n", "expected a JSON object"),
        ("notext.jsonl", b'{"body": "x"}\n', "expected a string field 'text'"),
    ],
)
def test_bad_text_data_is_a_clear_data_error(
    tmp_path: Path, name: str, content: bytes, match: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataError, match=match):
        lm(path, tmp_path / "cache")


def test_missing_path_and_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        lm(tmp_path / "nope.txt", tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"no \.txt/\.md files"):
        lm(tmp_path / "empty", tmp_path)


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "secret.txt"
    path.write_text("text")

    def deny(path: object) -> int:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(autotune.core.files, "_open_for_reading", deny)  # root reads chmod 0
    with pytest.raises(DataError, match=r"cannot read data path .*: Permission denied"):
        lm(path, tmp_path / "cache")


@pytest.fixture
def specials(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """A character device, a FIFO and a socket: no reader may block on or exhaust them."""
    os.mkfifo(tmp_path / "fifo.txt")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock.csv"))
    yield {
        "a character device": Path("/dev/zero"),
        "a named pipe (FIFO)": tmp_path / "fifo.txt",
        "a socket": tmp_path / "sock.csv",
    }
    sock.close()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX special files")
def test_special_files_are_refused_by_every_reader(
    tmp_path: Path, specials: dict[str, Path]
) -> None:
    for kind, path in specials.items():
        message = f"data path {str(path)!r} is {kind}; expected a regular file"
        for read in (
            lambda p: load_documents(p),
            lambda p: lm(p, tmp_path / "cache"),
            lambda p: prepare_regression_data(p, seq_len=8, vocab_size=260),
            lambda p: prepare_seq2seq_data(p, vocab_size=64, max_src=8, max_tgt=4),
        ):
            with pytest.raises(DataError) as info:
                read(path)
            assert message in str(info.value)
    assert not (tmp_path / "cache").exists()


def test_a_data_file_over_the_size_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(autotune.data.corpus, "MAX_FILE_BYTES", 64)
    (tmp_path / "ok.txt").write_text("x" * 64)
    assert load_documents(tmp_path / "ok.txt")[0].text == "x" * 64
    too_large = "is larger than 64 B, the most autotune reads from one file"
    (tmp_path / "big.txt").write_text("x" * 65)
    (tmp_path / "big.csv").write_text("text,target\n" + "a,1\n" * 20)
    (tmp_path / "big.jsonl").write_text('{"text": "a"}\n' * 10)
    for path in ("big.txt", "big.jsonl"):
        with pytest.raises(DataError, match=too_large):
            load_documents(tmp_path / path)
    with pytest.raises(DataError, match=too_large):
        prepare_regression_data(tmp_path / "big.csv", seq_len=8, vocab_size=260)


def test_a_file_longer_than_its_size_is_still_capped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file reporting no size (as /proc files do) is read up to the limit, no further."""
    proc = Path("/proc/self/status")  # a regular file of size 0 holding about 1 KB
    if not proc.is_file() or proc.stat().st_size != 0:
        pytest.skip("needs Linux's /proc")
    monkeypatch.setattr(autotune.data.corpus, "MAX_FILE_BYTES", 64)
    with pytest.raises(DataError, match="larger than 64 B"):
        load_documents(proc)
    monkeypatch.setattr(autotune.data.corpus, "MAX_FILE_BYTES", 2**20)
    assert "VmPeak" in load_documents(proc)[0].text


def test_vocab_too_small_for_byte_tokenizer(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x" * 100)
    with pytest.raises(DataError, match="vocab_size=100"):
        lm(tmp_path / "a.txt", tmp_path, vocab_size=100)


def test_too_little_text_for_seq_len(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("short")
    with pytest.raises(DataError, match="fewer than seq_len"):
        lm(tmp_path / "a.txt", tmp_path, seq_len=64)


# -- the token cache -------------------------------------------------------------------------


def _small_corpus(folder: Path) -> Path:
    """Twelve short documents in ``folder/corpus``."""
    corpus = folder / "corpus"
    corpus.mkdir()
    for i in range(12):
        (corpus / f"{i}.txt").write_text(f"document {i} " * 30)
    return corpus


def test_token_cache_is_reused_without_tokenizing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = _small_corpus(tmp_path)
    cache = tmp_path / "cache"
    first = prepare_lm_data(corpus, seq_len=8, vocab_size=260, cache_dir=cache)
    assert first.stats is not None and not first.stats.cached

    def boom(self: ByteTokenizer, text: str) -> np.ndarray:
        raise AssertionError("tokenized again")

    monkeypatch.setattr(ByteTokenizer, "encode", boom)
    second = prepare_lm_data(corpus, seq_len=8, vocab_size=260, cache_dir=cache)
    assert second.stats is not None and second.stats.cached
    assert second.stats.train_tokens == first.stats.train_tokens
    assert torch.equal(second.train[3]["input_ids"], first.train[3]["input_ids"])
    # a changed source is a new cache entry: tokenized again
    (corpus / "0.txt").write_text("changed " * 40)
    with pytest.raises(AssertionError, match="tokenized again"):
        prepare_lm_data(corpus, seq_len=8, vocab_size=260, cache_dir=cache)


def test_lm_dataset_pickles_without_the_memmap(tmp_path: Path) -> None:
    import pickle

    data = prepare_lm_data(None, seq_len=32, vocab_size=260, cache_dir=tmp_path)
    ds = data.train
    assert isinstance(ds, LMDataset)
    _ = ds[0]  # opens the memmap
    copy = pickle.loads(pickle.dumps(ds))
    assert copy._tokens is None
    assert torch.equal(copy[5]["labels"], ds[5]["labels"])


def test_unigram_entropy() -> None:
    assert unigram_entropy(np.array([1, 1, 1, 1])) == pytest.approx(0.0)
    assert unigram_entropy(np.array([0, 1, 2, 3])) == pytest.approx(np.log(4))


# -- the sampler ------------------------------------------------------------------------------


def test_sampler_order_depends_only_on_seed_and_epoch_and_resumes_mid_epoch() -> None:
    data: Any = list(range(50))  # a map-style dataset
    a = list(ResumableSampler(data, seed=3, epoch=1))
    assert a == list(ResumableSampler(data, seed=3, epoch=1))
    assert a != list(ResumableSampler(data, seed=3, epoch=2))
    assert sorted(a) == data
    assert list(ResumableSampler(data, seed=3, epoch=1, start=20)) == a[20:]
    ranks = [list(ResumableSampler(data, num_replicas=2, rank=r, seed=3)) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == 25
    assert set(ranks[0]).isdisjoint(ranks[1])


@pytest.mark.parametrize("workers", [0, 2])
def test_the_burst_and_the_trainer_build_the_same_loader(tmp_path: Path, workers: int) -> None:
    """One rule for the DataLoader's arguments: what a burst measured is what is trained."""
    extra: dict[str, Any] = {"persistent_workers": True, "prefetch_factor": 3} if workers else {}
    cfg = TrainConfig(micro_batch=4, seq_len=8, num_workers=workers, pin_memory=True, **extra)
    measured = trial_batches.make_loader(make_spec(), cfg, samples=32, seed=0)
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):  # several documents: however they split, the training split has some
        (docs / f"{i}.txt").write_text("abcdefgh" * 60)
    data = prepare_lm_data(docs, seq_len=8, vocab_size=260, cache_dir=tmp_path / "cache")
    stream = BatchStream(data, config=cfg, seed=0, dist=DistInfo())
    stream.build(cfg)
    trained = stream.loader
    assert trained is not None
    names = [
        "batch_size", "drop_last", "num_workers", "pin_memory", "persistent_workers",
        "prefetch_factor", "worker_init_fn",
    ]  # fmt: skip
    assert {n: getattr(measured, n) for n in names} == {n: getattr(trained, n) for n in names}
    assert trained.pin_memory and trained.batch_size == 4 and trained.drop_last
    if workers:
        extra["worker_init_fn"] = worker_init
    assert loader_kwargs(cfg) == {
        "batch_size": 4, "drop_last": True, "num_workers": workers, "pin_memory": True, **extra,
    }  # fmt: skip


# -- pointer-gen and text-regressor -----------------------------------------------------------


def test_word_vocab_and_tokenizer_files(tmp_path: Path) -> None:
    vocab = WordVocab.build([split_words("The cat, the hat."), ["the", "hat"]], vocab_size=7)
    assert vocab.words == ("the", "hat", ",")  # most frequent, ties alphabetical; 7 - 4 specials
    assert vocab.to_mapping()["the"] == 4
    vocab.save(tmp_path / "tokenizer.json")
    assert load_tokenizer(tmp_path / "tokenizer.json") == vocab
    ByteTokenizer().save(tmp_path / "byte.json")
    assert load_tokenizer(tmp_path / "byte.json") == ByteTokenizer()


def test_seq2seq_pairs(tmp_path: Path) -> None:
    from autotune.models import builtin_names

    if "pointer-gen" not in builtin_names():
        pytest.skip("the pointer-gen model is not available")
    path = tmp_path / "pairs.jsonl"
    rows = [{"source": f"the story number {i} is long", "summary": f"story {i}"} for i in range(30)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = prepare_seq2seq_data(path, vocab_size=20, max_src=12, max_tgt=5)
    sample = data.train[0]
    assert sample["src"].shape == (12,) and sample["tgt_out"].shape == (5,)
    assert isinstance(data.tokenizer, WordVocab) and data.tokenizer.vocab_size <= 20
    assert len(data.train) + len(data.val) == 30  # type: ignore[arg-type]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"source": "x"}) + "\n")
    with pytest.raises(DataError, match="'source' and 'summary'"):
        prepare_seq2seq_data(bad, vocab_size=20, max_src=12, max_tgt=5)


def _csv(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_regression_csv(tmp_path: Path) -> None:
    rows = "".join(f'"item {i}",{i},{2 * i + 1},blue,{10 + i}\n' for i in range(30))
    path = _csv(tmp_path / "d.csv", "text,a,b,color,price\n" + rows)
    data = prepare_regression_data(
        path, seq_len=16, vocab_size=260, target_column="price", log_target=True
    )
    assert data.spec_args == {"n_numeric": 2}
    assert data.extra["numeric_columns"] == ["a", "b"]
    sample = data.train[0]
    assert sample["input_ids"].shape == (16,) and sample["attention_mask"].dtype == torch.bool
    assert sample["numeric"].shape == (2,)
    numeric = torch.stack([data.train[i]["numeric"] for i in range(len(data.train))])  # type: ignore[arg-type]
    assert numeric.mean(0).abs().max() < 1e-5  # standardized with the training split's stats
    assert 2.0 < float(sample["target"]) < 4.0  # log1p(price)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("text,x\nhello,1\n", "no column 'target'"),
        ("body,target\nhello,1\n", "no column 'text'.*--text-column"),
        ("text,x,target\na,1,2\nb,,3\n", r"d.csv:3: column 'x' has a missing value"),
        ("text,target\na,1\nb,cheap\n", "must hold numbers"),
        ("", "empty"),
        ("text,target\n", "no rows"),
    ],
)
def test_bad_csv(tmp_path: Path, text: str, match: str) -> None:
    path = _csv(tmp_path / "d.csv", text)
    with pytest.raises(DataError, match=match):
        prepare_regression_data(path, seq_len=8, vocab_size=260)


def test_models_without_default_data_say_what_to_give() -> None:
    spec = make_spec()
    for task, word in (("seq2seq", "JSONL"), ("regression", "CSV")):
        other = spec.__class__(**{**spec.__dict__, "task": task})
        with pytest.raises(DataError, match=f"needs --data.*{word}"):
            load_data(other, None, seq_len=8)


@pytest.mark.parametrize("damage", ["meta.json", "train.bin", "val.bin"])
def test_a_damaged_cache_entry_is_rebuilt_in_its_place(tmp_path: Path, damage: str) -> None:
    # a garbage meta.json, a cut-off train.bin, a folder for val.bin: the rebuilt entry
    # could not replace the damaged one, which was kept (its meta.json was there), and
    # every later run was refused "could not be written or read"
    corpus = _small_corpus(tmp_path)
    cache = tmp_path / "cache"
    first = prepare_lm_data(corpus, seq_len=8, vocab_size=260, cache_dir=cache)
    (entry,) = [e for e in (cache / "tokens").iterdir() if not e.name.startswith(".")]
    part = entry / damage
    if damage == "meta.json":
        part.write_text("garbage")
    elif damage == "train.bin":
        part.write_bytes(part.read_bytes()[:-6])
    else:
        part.unlink()
        part.mkdir()
    again = prepare_lm_data(corpus, seq_len=8, vocab_size=260, cache_dir=cache)
    assert again.stats is not None and not again.stats.cached  # rebuilt
    left = sorted(p.name for p in (cache / "tokens").iterdir())
    assert left == [f".{entry.name}.lock", entry.name]  # nothing set aside is left
    third = prepare_lm_data(corpus, seq_len=8, vocab_size=260, cache_dir=cache)
    assert third.stats is not None and third.stats.cached
    assert first.stats is not None and third.stats.train_tokens == first.stats.train_tokens


def test_a_cache_folder_that_cannot_be_written_is_a_data_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno
    import tempfile

    def refuse(*args: object, **kwargs: object) -> str:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(
        tempfile, "mkdtemp", refuse
    )  # as a read-only folder would (root ignores modes)
    with pytest.raises(
        DataError,
        match=r"cannot write the token cache in .*Permission denied.*"
        r"AUTOTUNE_CACHE_DIR",
    ):
        prepare_lm_data(None, seq_len=16, vocab_size=260, cache_dir=tmp_path / "ro")


def _pipeline_spec(samples: int, *, task: str = "custom", loader: bool = False) -> Any:
    from dataclasses import replace

    from torch.utils.data import DataLoader

    data = [{"x": torch.full((3,), float(i))} for i in range(samples)]

    def collate(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        return {"x": torch.stack([item["x"] for item in items]), "n": torch.tensor(len(items))}

    def data_fn(args: Any, seq_len: int) -> Any:
        return DataLoader(data, batch_size=7, collate_fn=collate) if loader else data

    return replace(make_spec(), task=task, data_fn=data_fn)


def test_a_spec_with_its_own_pipeline_trains_on_it_with_the_tail_held_out() -> None:
    data = load_data(_pipeline_spec(20, loader=True), None, seq_len=8)
    assert [int(data.train[i]["x"][0]) for i in range(len(data.train))] == list(range(18))
    assert [int(data.val[i]["x"][0]) for i in range(len(data.val))] == [18, 19]
    assert data.tokenizer is None
    assert data.collate_fn is not None  # the DataLoader's own collate_fn is kept
    assert "n" in data.collate_fn([data.train[0], data.train[1]])
    assert "20 samples, 18 to train on, the last 2 for validation" in data.summary[0]
    # a built-in task with a data_fn reads its pipeline too, not the corpus
    assert len(load_data(_pipeline_spec(10, task="lm"), None, seq_len=8).val) == 1


def test_a_pipeline_too_small_or_a_file_beside_it_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="gave 1 sample"):
        load_data(_pipeline_spec(1), None, seq_len=8)
    with pytest.raises(DataError, match="so --data is not used"):
        load_data(_pipeline_spec(10), tmp_path / "corpus.txt", seq_len=8)


def test_a_custom_model_without_a_pipeline_says_how_to_train_it() -> None:
    from dataclasses import replace

    with pytest.raises(DataError, match=r"neither a built-in task .* nor a data_fn"):
        load_data(replace(make_spec(), task="custom"), None, seq_len=8)


def test_a_half_built_cache_entry_of_a_builder_that_is_gone_goes_at_the_next_build(
    tmp_path: Path,
) -> None:
    """A builder killed before it could remove its half-built entry (SIGKILL, a SIGTERM or
    a rank's Ctrl-C before any handler) left it for good, as large as the corpus's tokens;
    the next build in that cache removes it, and no other folder."""
    import subprocess

    from autotune.core.makers import maker_tag

    gone = subprocess.Popen(["true"])
    gone.wait()
    tokens = tmp_path / "cache" / "tokens"
    abandoned = tokens / f".entry.{gone.pid}-6b0d2f39-x1y2z3w4.tmp"
    building = tokens / f".entry.{maker_tag()}-a1b2c3d4.tmp"  # a live builder's
    older = tokens / ".entry.a1b2c3d4.tmp"  # an older autotune's name: no maker in it
    for folder in (abandoned, building, older):
        folder.mkdir(parents=True)
        (folder / "train.bin").write_bytes(b"\0" * 64)
    corpus = _small_corpus(tmp_path)
    prepare_lm_data(corpus, seq_len=8, vocab_size=260, cache_dir=tmp_path / "cache")
    assert [f.exists() for f in (abandoned, building, older)] == [False, True, True]
