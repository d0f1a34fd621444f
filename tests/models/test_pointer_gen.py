"""Pointer-generator: examples, chunked encoding, the copy distribution, decoding, ROUGE."""

from __future__ import annotations

import pytest
import torch
from _tiny_models import TINY

from autotune.models import get_model
from autotune.models.pointer_gen import (
    BOS,
    EOS,
    PAD,
    UNK,
    PointerGenerator,
    beam_search,
    encode_example,
    greedy_decode,
    ids_to_words,
    make_vocab,
    oov_words,
    rouge,
)

SPEC = TINY["pointer-gen"].spec  # vocab 40, chunks of 8 (up to 3), targets of 6


def _model(**overrides: object) -> PointerGenerator:
    torch.manual_seed(0)
    model = SPEC.build(**overrides)
    assert isinstance(model, PointerGenerator)
    return model


# -- examples ------------------------------------------------------------------------------------


def test_encode_example_maps_oovs_to_the_extended_vocab() -> None:
    vocab = make_vocab(["the", "cat", "sat", "on", "the", "mat", "the", "cat"], size=8)
    assert [vocab[t] for t in ("<pad>", "<unk>", "<s>", "</s>")] == [PAD, UNK, BOS, EOS]
    assert vocab["the"] == 4 and vocab["cat"] == 5  # most frequent first
    src = ["the", "zebra", "sat", "near", "the", "okapi"]  # zebra, near, okapi: OOV (sat is id 6/7)
    ex = encode_example(
        src, ["zebra", "and", "the", "okapi"], vocab, max_src=8, max_tgt=6, vocab_size=8
    )
    oovs = oov_words(src, vocab, max_src=8)
    assert oovs == ["zebra", "near", "okapi"]
    assert ex["n_oov"].item() == 3
    assert ex["src"].tolist() == [4, UNK, vocab["sat"], UNK, 4, UNK, PAD, PAD]
    assert ex["src_ext"].tolist() == [4, 8, vocab["sat"], 9, 4, 10, PAD, PAD]
    assert ex["src_mask"].tolist() == [True] * 6 + [False] * 2
    # "and" is OOV and not in the source: UNK; zebra/okapi can be copied: extended ids
    assert ex["tgt_in"].tolist() == [BOS, UNK, UNK, 4, UNK, PAD]
    assert ex["tgt_out"].tolist() == [8, UNK, 4, 10, EOS, -100]
    id_to_word = sorted(vocab, key=vocab.__getitem__)
    assert ids_to_words([8, 4, 10], id_to_word, oovs) == ["zebra", "the", "okapi"]


def test_encode_example_truncates_and_always_ends_with_eos() -> None:
    vocab = make_vocab(list("abcdef"), size=10)
    ex = encode_example(list("abcdef"), list("abcdef"), vocab, max_src=4, max_tgt=3)
    assert ex["src"].shape == (4,) and ex["src_mask"].all()
    assert ex["tgt_out"].tolist() == [vocab["a"], vocab["b"], EOS]
    assert ex["tgt_in"].tolist() == [BOS, vocab["a"], vocab["b"]]
    with pytest.raises(ValueError, match="empty"):
        encode_example([], ["a"], vocab, max_src=4, max_tgt=3)
    with pytest.raises(ValueError, match="ids must be in"):
        encode_example(["a"], ["a"], {"a": 12}, max_src=4, max_tgt=3, vocab_size=10)


def test_encoded_examples_collate_into_a_batch_the_model_takes() -> None:
    vocab = make_vocab(["a", "b", "c", "d", "e", "f", "g"], size=SPEC.args["vocab_size"])
    size = SPEC.args["vocab_size"]
    examples = [
        encode_example(
            ["a", "b", "q", "c"], ["q", "b"], vocab, max_src=20, max_tgt=6, vocab_size=size
        ),
        encode_example(["d", "e"], ["e", "z"], vocab, max_src=20, max_tgt=6, vocab_size=size),
    ]
    batch = torch.utils.data.default_collate(examples)
    loss = SPEC.loss(_model(), batch)
    assert torch.isfinite(loss)


# -- the model ----------------------------------------------------------------------------------


def test_tokens_per_sample_counts_source_and_target() -> None:
    spec = get_model("pointer-gen")
    assert spec.tokens_per_sample() == 768 + 192
    assert spec.tokens_per_sample(256) == 256 + 192
    assert SPEC.tokens_per_sample(20) == 20 + 6


def test_chunks_are_encoded_independently() -> None:
    model = _model()
    batch = SPEC.make_batch(batch_size=2, seq_len=20)
    changed = batch["src"].clone()
    changed[:, 8:16] = (changed[:, 8:16] + 1) % SPEC.args["vocab_size"]  # the second chunk
    with torch.no_grad():
        a = model.encode(batch["src"], batch["src_mask"])[0]
        b = model.encode(changed, batch["src_mask"])[0]
    torch.testing.assert_close(a[:, :8], b[:, :8])  # chunk 1 never sees chunk 2
    torch.testing.assert_close(a[:, 16:], b[:, 16:])  # nor chunk 3
    assert not torch.allclose(a[:, 8:16], b[:, 8:16])
    with pytest.raises(ValueError, match="exceeds"):
        model.encode(torch.ones(1, 25, dtype=torch.long), torch.ones(1, 25, dtype=torch.bool))


def test_padding_is_invisible() -> None:
    model = _model()
    batch = SPEC.make_batch(batch_size=2, seq_len=20)
    batch["src_mask"][:, 13:] = False
    loss = SPEC.loss(model, batch)
    for key in ("src", "src_ext"):  # whatever sits in the padding
        batch[key][:, 13:] = 7
    torch.testing.assert_close(SPEC.loss(model, batch), loss)


@pytest.mark.parametrize("p_gen_bias", [-40.0, 40.0])
def test_copy_distribution_is_the_attention_scattered_into_the_extended_vocab(
    p_gen_bias: float,
) -> None:
    """p_gen ~ 0: every word's probability is its attention mass (an OOV's included);
    p_gen ~ 1: OOVs get nothing and the vocabulary part is the softmax."""
    model = _model()
    with torch.no_grad():
        model.p_gen.weight.zero_()
        model.p_gen.bias.fill_(p_gen_bias)
    batch = SPEC.make_batch(batch_size=3, seq_len=20)
    V, S = SPEC.args["vocab_size"], 20
    with torch.no_grad():
        enc, state = model.start(batch["src"], batch["src_ext"], batch["src_mask"])
        prev = torch.full((3,), BOS)
        dist, _ = model.decode_step(enc, prev, state)  # (3, V + S)
        _, _, _, _, attn = model._step(model.embedding(prev), *state, enc[0], enc[1], enc[2])
    assert dist.shape == (3, V + S)
    assert batch["n_oov"].sum() > 0, "the seeded batch should hold OOVs"
    torch.testing.assert_close(dist.sum(-1), torch.ones(3))
    for b in range(3):
        n_oov = int(batch["n_oov"][b])
        for i in range(n_oov):
            mass = attn[b][batch["src_ext"][b] == V + i].sum()
            expected = mass if p_gen_bias < 0 else torch.tensor(0.0)
            torch.testing.assert_close(dist[b, V + i], expected)
        torch.testing.assert_close(dist[b, V + n_oov :].sum(), torch.tensor(0.0))  # unused slots


def _copy_task(batch_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Sources of in-vocabulary words with one OOV; the target is that OOV word alone."""
    V, S = SPEC.args["vocab_size"], 8
    src = torch.randint(4, V, (batch_size, S), generator=generator)
    pos = torch.randint(0, S, (batch_size,), generator=generator)
    src_ext = src.clone()
    rows = torch.arange(batch_size)
    src[rows, pos], src_ext[rows, pos] = UNK, V
    return {
        "src": src,
        "src_ext": src_ext,
        "src_mask": torch.ones(batch_size, S, dtype=torch.bool),
        "tgt_in": torch.tensor([[BOS, UNK]]).repeat(batch_size, 1),
        "tgt_out": torch.tensor([[V, EOS]]).repeat(batch_size, 1),
        "n_oov": torch.ones(batch_size, dtype=torch.long),
    }


def test_it_learns_to_copy_a_word_that_exists_only_in_the_source() -> None:
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(0)
    for _ in range(30):  # fresh examples every step: it must learn to copy, not memorise
        loss = SPEC.loss(model, _copy_task(32, gen))
        opt.zero_grad()
        loss.backward()
        opt.step()
    test = _copy_task(32, torch.Generator().manual_seed(123))
    V = SPEC.args["vocab_size"]
    hyps = greedy_decode(model, test["src"], test["src_ext"], test["src_mask"], max_len=3)
    assert sum(h == [V] for h in hyps) >= 30, hyps  # the OOV, then EOS
    best = beam_search(model, test["src"][0], test["src_ext"][0], test["src_mask"][0], max_len=3)
    assert best == [V]
    assert SPEC.extras["metric"](model, test)["rouge1"] > 0.9


def test_coverage_adds_its_loss_and_parameters() -> None:
    batch = SPEC.make_batch(batch_size=2, seq_len=20)
    plain, cov = _model(), _model(coverage=True)
    assert plain.cov_proj is None
    cov.load_state_dict(plain.state_dict(), strict=False)
    with torch.no_grad():
        cov.cov_proj.weight.zero_()  # same attention as without coverage at first
    extra = SPEC.loss(cov, batch) - SPEC.loss(plain, batch)  # the coverage term, >= 0
    assert extra.item() > 0
    zero_weight = _model(coverage=True, coverage_weight=0.0)
    zero_weight.load_state_dict(cov.state_dict())
    torch.testing.assert_close(SPEC.loss(zero_weight, batch), SPEC.loss(plain, batch))


def test_greedy_and_beam_search_agree_with_one_beam() -> None:
    model = _model()
    batch = SPEC.make_batch(batch_size=2, seq_len=20)
    greedy = greedy_decode(model, batch["src"], batch["src_ext"], batch["src_mask"], max_len=5)
    assert len(greedy) == 2 and all(len(h) <= 5 for h in greedy)
    for b in range(2):
        one = beam_search(
            model,
            batch["src"][b],
            batch["src_ext"][b],
            batch["src_mask"][b],
            beam_size=1,
            max_len=5,
        )
        assert one == greedy[b]
    four = beam_search(model, batch["src"][0], batch["src_ext"][0], batch["src_mask"][0], max_len=5)
    assert 1 <= len(four) <= 5
    assert model.training


# -- ROUGE ----------------------------------------------------------------------------------------


def test_rouge_by_hand() -> None:
    ref, hyp = ["the", "cat", "sat", "on", "the", "mat"], ["the", "cat", "on", "the", "mat"]
    scores = rouge(ref, hyp)
    assert scores["rouge1"] == pytest.approx(10 / 11)  # P = 5/5, R = 5/6
    assert scores["rouge2"] == pytest.approx(2 / 3)  # P = 3/4, R = 3/5
    assert scores["rougeL"] == pytest.approx(10 / 11)  # LCS = 5
    assert rouge(ref, ref) == {"rouge1": 1.0, "rouge2": 1.0, "rougeL": 1.0}
    assert rouge(ref, ["dog"]) == {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
    assert rouge([], []) == {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
    assert rouge(["a", "b", "c"], ["c", "b", "a"])["rougeL"] == pytest.approx(1 / 3)


def test_fewer_chunks_are_the_specs_limit_and_default_too() -> None:
    """``--model-arg max_chunks=3``: the spec kept its 768 tokens, and every trial's
    source was refused by a model that takes 3 x 128."""
    from autotune.models import get_model

    spec = get_model("pointer-gen")
    fewer = spec.with_args(max_chunks=3)
    assert (fewer.max_seq_len, fewer.seq_len) == (384, 384)
    small = fewer.with_args(vocab_size=64, emb_dim=8, hidden=8)
    assert small.max_seq_len == 384
    loss = small.loss(small.build(), small.make_batch(batch_size=2))  # at the default length
    assert torch.isfinite(loss)
    more = spec.with_args(max_chunks=8)
    assert (more.max_seq_len, more.seq_len) == (1024, 768)
