"""Pointer-generator summarizer (See et al. 2017): BiLSTM encoder, attentive LSTM decoder, copy.

Architecture: shared word embeddings (128); a 2-layer bidirectional LSTM encoder (256 per
direction); a one-layer LSTM decoder run step by step, fed the previous word and the
previous context vector; Bahdanau (additive) attention over the source,
``e_i = v . tanh(W_h h_i + W_s [h_t; c_t] + w_c cov_i + b)``; the output distribution
``p_gen * P_vocab + (1 - p_gen) * attention`` where the attention mass is scatter-added
into an extended vocabulary so that source words outside the vocabulary (OOVs) can be
copied; optional coverage (``coverage=True``): the attention feature sees the summed past
attention and the loss adds ``coverage_weight * sum_i min(a_i, cov_i)`` per step.

Chunking: a source of up to ``max_chunks * chunk_len`` (6 x 128) tokens is cut into
consecutive chunks of ``chunk_len`` tokens and the encoder LSTM reads every chunk
independently, all chunks of all samples as one batch: the LSTM's serial length is 128
rather than 768. Attention then runs over every source position of every chunk; the
decoder's initial state is the reduced top-layer final state, averaged over the non-empty
chunks.

Length caps are not knobs: cutting the source or the target changes the task (what the
model may read, what it must write), so they are not math-preserving. The source length is
the spec's ``seq_len`` (up to 768) and the target length is the ``tgt_len`` argument
(default 192); a search that varies them changes the problem, and should do so knowingly.

Special ids: PAD=0, UNK=1, BOS=2, EOS=3. The extended vocabulary of a batch with source
length S has ``vocab_size + S`` entries (OOV number i of a sample -> ``vocab_size + i``),
which holds every possible source OOV, so its size needs no host sync.

Batch: ``src`` (B, S) long (OOV -> UNK), ``src_ext`` (B, S) long (extended ids),
``src_mask`` (B, S) bool (a prefix of True), ``tgt_in`` (B, T) long (BOS + target, OOV ->
UNK), ``tgt_out`` (B, T) long (target + EOS in extended ids, pad = -100), ``n_oov`` (B,)
long. ``encode_example`` builds one sample from word lists.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Iterator, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torch.utils.checkpoint import checkpoint

from autotune.contract.spec import Batch, ModelSpec

from ._common import IGNORE_INDEX, check_sizes, unwrap
from ._summaries import (
    BOS,
    EOS,
    PAD,
    SPECIAL_TOKENS,
    UNK,
    encode_example,
    ids_to_words,
    make_vocab,
    oov_words,
    rouge,
)
from .registry import register

__all__ = [
    "BOS",
    "EOS",
    "PAD",
    "SPECIAL_TOKENS",
    "UNK",
    "PointerGenerator",
    "beam_search",
    "encode_example",
    "greedy_decode",
    "ids_to_words",
    "make_vocab",
    "oov_words",
    "pointer_gen_spec",
    "rouge",
]

_EPS = 1e-12


# -- the model ---------------------------------------------------------------------------------


class PointerGenerator(nn.Module):
    """``forward(**batch)`` -> the mean loss per target token (plus coverage, if on)."""

    def __init__(
        self,
        *,
        vocab_size: int,
        emb_dim: int = 128,
        hidden: int = 256,
        enc_layers: int = 2,
        chunk_len: int = 128,
        max_chunks: int = 6,
        tgt_len: int = 192,
        coverage: bool = False,
        coverage_weight: float = 1.0,
        ckpt_chunk: int = 32,
        activation_checkpointing: bool = False,
    ) -> None:
        super().__init__()
        check_sizes(enc_layers=enc_layers, emb_dim=emb_dim, hidden=hidden)
        if vocab_size <= len(SPECIAL_TOKENS):
            raise ValueError(f"vocab_size must exceed {len(SPECIAL_TOKENS)}, got {vocab_size}")
        self.vocab_size = vocab_size
        self.hidden = hidden
        self.chunk_len = chunk_len
        self.max_src_len = chunk_len * max_chunks
        self.max_tgt_len = tgt_len
        self.coverage = coverage
        self.coverage_weight = coverage_weight
        self.ckpt_chunk = ckpt_chunk
        self.activation_checkpointing = activation_checkpointing
        enc_dim = 2 * hidden  # both directions
        attn_dim = enc_dim
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD)
        # encoder (touched once per source token)
        self.encoder = nn.LSTM(
            emb_dim, hidden, num_layers=enc_layers, bidirectional=True, batch_first=True
        )
        self.enc_proj = nn.Linear(enc_dim, attn_dim, bias=False)  # W_h
        # bridge (once per sample)
        self.reduce_h = nn.Linear(enc_dim, hidden)
        self.reduce_c = nn.Linear(enc_dim, hidden)
        # decoder (touched once per target token)
        self.x_proj = nn.Linear(emb_dim + enc_dim, emb_dim)  # input feeding
        self.cell = nn.LSTMCell(emb_dim, hidden)
        self.dec_proj = nn.Linear(2 * hidden, attn_dim)  # W_s [h; c] + b
        # w_c, only with coverage (a model trained without it loads with strict=False)
        self.cov_proj = nn.Linear(1, attn_dim, bias=False) if coverage else None
        self.v = nn.Linear(attn_dim, 1, bias=False)
        self.p_gen = nn.Linear(enc_dim + hidden + emb_dim, 1)
        self.out1 = nn.Linear(hidden + enc_dim, hidden)
        self.out2 = nn.Linear(hidden, vocab_size)

    # -- encoder ---------------------------------------------------------------------------
    def encode(
        self, src: torch.Tensor, src_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Encoder outputs (B, S, 2H), their attention features (B, S, A), and the
        decoder's initial state h0, c0 (B, H)."""
        B, S = src.shape
        if self.max_src_len < S:
            raise ValueError(
                f"source length {S} exceeds max_chunks * chunk_len = {self.max_src_len}"
            )
        cl = self.chunk_len
        n = math.ceil(S / cl)
        chunks = F.pad(src, (0, n * cl - S), value=PAD).view(B * n, cl)  # (B*n, cl)
        mask = F.pad(src_mask, (0, n * cl - S), value=False).view(B * n, cl)
        lengths = mask.sum(1)  # (B*n,)
        packed = pack_padded_sequence(
            self.embedding(chunks),  # (B*n, cl, E)
            lengths.clamp_min(1).cpu(),  # an empty chunk runs one PAD step, masked below
            batch_first=True,
            enforce_sorted=False,
        )
        out_packed, (h_n, c_n) = self.encoder(packed)
        out, _ = pad_packed_sequence(out_packed, batch_first=True, total_length=cl)
        out = out.reshape(B, n * cl, -1)[:, :S] * src_mask.unsqueeze(-1)  # (B, S, 2H)
        nonempty = (lengths > 0).view(B, n, 1).to(out.dtype)  # (B, n, 1)

        def bridge(state: torch.Tensor, proj: nn.Linear) -> torch.Tensor:
            top = torch.cat([state[-2], state[-1]], dim=-1).view(B, n, -1)  # (B, n, 2H)
            mean = (top * nonempty).sum(1) / nonempty.sum(1).clamp_min(1.0)  # (B, 2H)
            return F.relu(proj(mean))  # (B, H)

        return out, self.enc_proj(out), bridge(h_n, self.reduce_h), bridge(c_n, self.reduce_c)

    # -- one decoder step ----------------------------------------------------------------------
    def _step(
        self,
        y_emb: torch.Tensor,  # (B, E) previous word
        h: torch.Tensor,  # (B, H)
        c: torch.Tensor,  # (B, H)
        ctx: torch.Tensor,  # (B, 2H) previous context
        cov: torch.Tensor,  # (B, S) summed past attention
        enc_out: torch.Tensor,  # (B, S, 2H)
        enc_feat: torch.Tensor,  # (B, S, A)
        src_mask: torch.Tensor,  # (B, S)
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.x_proj(torch.cat([y_emb, ctx], dim=-1))  # (B, E)
        h, c = self.cell(x, (h, c))  # (B, H) each
        feat = enc_feat + self.dec_proj(torch.cat([h, c], dim=-1)).unsqueeze(1)  # (B, S, A)
        if self.cov_proj is not None:
            feat = feat + self.cov_proj(cov.unsqueeze(-1).to(feat.dtype))
        scores = self.v(torch.tanh(feat)).squeeze(-1).float()  # (B, S)
        attn = torch.softmax(scores.masked_fill(~src_mask, float("-inf")), dim=-1)
        ctx = torch.bmm(attn.to(enc_out.dtype).unsqueeze(1), enc_out).squeeze(1)  # (B, 2H)
        return x, h, c, ctx, attn

    def final_distribution(
        self,
        h: torch.Tensor,  # (B, T, H)
        ctx: torch.Tensor,  # (B, T, 2H)
        x: torch.Tensor,  # (B, T, E)
        attn: torch.Tensor,  # (B, T, S)
        src_ext: torch.Tensor,  # (B, S)
    ) -> torch.Tensor:
        """P(word) over the extended vocabulary: (B, T, vocab_size + S), float32."""
        logits = self.out2(self.out1(torch.cat([h, ctx], dim=-1)))  # (B, T, V)
        p_vocab = torch.softmax(logits.float(), dim=-1)
        p_gen = torch.sigmoid(self.p_gen(torch.cat([ctx, h, x], dim=-1)).float())  # (B, T, 1)
        extra = p_vocab.new_zeros(*p_vocab.shape[:-1], attn.shape[-1])  # room for OOVs
        dist = torch.cat([p_gen * p_vocab, extra], dim=-1)  # (B, T, V + S)
        index = src_ext.unsqueeze(1).expand(-1, attn.shape[1], -1)  # (B, T, S)
        return dist.scatter_add(-1, index, (1.0 - p_gen) * attn.float())

    def _nll_sum(
        self,
        h: torch.Tensor,
        ctx: torch.Tensor,
        x: torch.Tensor,
        attn: torch.Tensor,
        src_ext: torch.Tensor,
        tgt_out: torch.Tensor,  # (B, T)
    ) -> torch.Tensor:
        dist = self.final_distribution(h, ctx, x, attn, src_ext)  # (B, T, V + S)
        valid = tgt_out != IGNORE_INDEX
        p = dist.gather(-1, tgt_out.clamp_min(0).unsqueeze(-1)).squeeze(-1)  # (B, T)
        return -(torch.log(p + _EPS) * valid).sum()

    # -- training ----------------------------------------------------------------------------
    def forward(
        self,
        src: torch.Tensor,
        src_ext: torch.Tensor,
        src_mask: torch.Tensor,
        tgt_in: torch.Tensor,
        tgt_out: torch.Tensor,
        n_oov: torch.Tensor | None = None,  # not needed: the extended vocab is V + S
    ) -> torch.Tensor:
        B, T = tgt_in.shape
        if self.max_tgt_len < T:
            raise ValueError(f"target length {T} exceeds tgt_len {self.max_tgt_len}")
        ckpt = self.activation_checkpointing and torch.is_grad_enabled()
        enc_out, enc_feat, h, c = self.encode(src, src_mask)
        emb = self.embedding(tgt_in)  # (B, T, E)
        ctx = enc_out.new_zeros(B, enc_out.shape[-1])  # (B, 2H)
        cov = enc_out.new_zeros(src.shape, dtype=torch.float32)  # (B, S)
        xs, hs, ctxs, attns, cov_terms = [], [], [], [], []
        for t in range(T):
            args = (emb[:, t], h, c, ctx, cov, enc_out, enc_feat, src_mask)
            if ckpt:  # keep only each step's inputs; recompute its attention in backward
                x, h, c, ctx, attn = checkpoint(self._step, *args, use_reentrant=False)
            else:
                x, h, c, ctx, attn = self._step(*args)
            if self.coverage:
                cov_terms.append(torch.minimum(attn, cov).sum(-1))  # (B,)
                cov = cov + attn
            xs.append(x)
            hs.append(h)
            ctxs.append(ctx)
            attns.append(attn)
        X, H, CTX, A = (torch.stack(v, dim=1) for v in (xs, hs, ctxs, attns))  # (B, T, .)
        valid = tgt_out != IGNORE_INDEX  # (B, T)
        n_tokens = valid.sum().clamp_min(1)
        step = self.ckpt_chunk if ckpt else T
        nll = enc_out.new_zeros((), dtype=torch.float32)
        for s in range(0, T, step):  # under checkpointing: one slice of logits alive at a time
            part = (H[:, s : s + step], CTX[:, s : s + step], X[:, s : s + step])
            part_args = (*part, A[:, s : s + step], src_ext, tgt_out[:, s : s + step])
            if ckpt:
                nll = nll + checkpoint(self._nll_sum, *part_args, use_reentrant=False)
            else:
                nll = nll + self._nll_sum(*part_args)
        loss = nll / n_tokens
        if self.coverage:
            cov_loss = (torch.stack(cov_terms, dim=1) * valid).sum() / n_tokens
            loss = loss + self.coverage_weight * cov_loss
        return loss

    # -- inference ---------------------------------------------------------------------------
    def decode_step(
        self,
        enc: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
        prev_ids: torch.Tensor,  # (B,) extended ids of the previous word
        state: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],  # h, c, ctx, cov
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
        """The next word's distribution (B, V + S) and the new state. ``enc`` is
        (enc_out, enc_feat, src_mask, src_ext)."""
        enc_out, enc_feat, src_mask, src_ext = enc
        h, c, ctx, cov = state
        prev = prev_ids.masked_fill(prev_ids >= self.vocab_size, UNK)  # copied OOV -> UNK
        x, h, c, ctx, attn = self._step(
            self.embedding(prev), h, c, ctx, cov, enc_out, enc_feat, src_mask
        )
        dist = self.final_distribution(
            h.unsqueeze(1), ctx.unsqueeze(1), x.unsqueeze(1), attn.unsqueeze(1), src_ext
        ).squeeze(1)
        return dist, (h, c, ctx, cov + attn if self.coverage else cov)

    def start(
        self, src: torch.Tensor, src_ext: torch.Tensor, src_mask: torch.Tensor
    ) -> tuple[
        tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
        tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    ]:
        """Encode a batch: the ``enc`` and initial ``state`` that ``decode_step`` takes."""
        enc_out, enc_feat, h, c = self.encode(src, src_mask)
        ctx = enc_out.new_zeros(src.shape[0], enc_out.shape[-1])
        cov = enc_out.new_zeros(src.shape, dtype=torch.float32)
        return (enc_out, enc_feat, src_mask, src_ext), (h, c, ctx, cov)


def _as_model(module: nn.Module) -> PointerGenerator:
    model = unwrap(module)
    if not isinstance(model, PointerGenerator):
        raise TypeError(f"expected a PointerGenerator, got {type(model).__name__}")
    return model


@contextlib.contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode and no gradients, then the model's previous mode again."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def greedy_decode(
    module: nn.Module,
    src: torch.Tensor,
    src_ext: torch.Tensor,
    src_mask: torch.Tensor,
    *,
    max_len: int,
    min_len: int = 1,
) -> list[list[int]]:
    """The most probable word at each step, for a batch: extended ids, EOS not included."""
    model = _as_model(module)
    B = src.shape[0]
    with _eval_mode(model):
        enc, state = model.start(src, src_ext, src_mask)
        prev = torch.full((B,), BOS, dtype=torch.long, device=src.device)
        steps = []
        done = torch.zeros(B, dtype=torch.bool, device=src.device)
        for t in range(max_len):
            dist, state = model.decode_step(enc, prev, state)  # (B, V + S)
            if t < min_len:
                dist[:, EOS] = 0.0
            prev = dist.argmax(-1)  # (B,)
            steps.append(prev)
            done = done | (prev == EOS)
            if bool(done.all()):
                break
    rows = torch.stack(steps, dim=1).tolist() if steps else [[] for _ in range(B)]
    return [row[: row.index(EOS)] if EOS in row else row for row in rows]


def beam_search(
    module: nn.Module,
    src: torch.Tensor,
    src_ext: torch.Tensor,
    src_mask: torch.Tensor,
    *,
    beam_size: int = 4,
    max_len: int = 100,
    min_len: int = 1,
    length_penalty: float = 1.0,
) -> list[int]:
    """Beam search for one example (tensors of shape (S,) or (1, S)): the best summary as
    extended ids, EOS not included. Hypotheses are ranked by log-probability divided by
    ``length ** length_penalty``."""
    if beam_size < 1:
        raise ValueError(f"beam_size must be positive, got {beam_size=}")
    model = _as_model(module)
    src, src_ext, src_mask = (t.reshape(1, -1) for t in (src, src_ext, src_mask))
    device = src.device
    with _eval_mode(model):
        enc1, state = model.start(src, src_ext, src_mask)
        tokens: list[list[int]] = [[]]
        scores = torch.zeros(1, device=device)
        finished: list[tuple[float, list[int]]] = []
        for t in range(max_len):
            k = len(tokens)
            enc = tuple(e.expand(k, *e.shape[1:]) for e in enc1)
            prev = torch.tensor([seq[-1] if seq else BOS for seq in tokens], device=device)
            dist, state = model.decode_step(enc, prev, state)  # type: ignore[arg-type]
            logp = torch.log(dist + _EPS)  # (k, W)
            if t < min_len:
                logp[:, EOS] = float("-inf")
            width = logp.shape[1]
            top_scores, top_idx = (
                (scores[:, None] + logp).view(-1).topk(min(2 * beam_size, k * width))
            )
            keep_origin, keep_tokens, keep_scores = [], [], []
            for score, idx in zip(top_scores.tolist(), top_idx.tolist(), strict=True):
                origin, word = divmod(idx, width)
                if word == EOS:
                    finished.append(
                        (score / max(len(tokens[origin]), 1) ** length_penalty, tokens[origin])
                    )
                else:
                    keep_origin.append(origin)
                    keep_tokens.append([*tokens[origin], word])
                    keep_scores.append(score)
                if len(keep_tokens) == beam_size:
                    break
            if len(finished) >= beam_size or not keep_tokens:
                break
            origin_t = torch.tensor(keep_origin, device=device)
            state = tuple(s.index_select(0, origin_t) for s in state)  # type: ignore[assignment]
            tokens = keep_tokens
            scores = torch.tensor(keep_scores, device=device)
        if not finished:  # nothing ended within max_len: rank the live beams
            finished = [
                (s / max(len(seq), 1) ** length_penalty, seq)
                for s, seq in zip(scores.tolist(), tokens, strict=True)
            ]
    return max(finished, key=lambda item: item[0])[1]


# -- the spec ------------------------------------------------------------------------------------


def _loss(module: nn.Module, batch: Batch) -> torch.Tensor:
    return module(**batch)


def _metric(module: nn.Module, batch: Batch) -> dict[str, float]:
    """Loss, and ROUGE-1/2/L F1 (over extended ids) of greedy summaries against the targets."""
    model = _as_model(module)
    with _eval_mode(model):
        loss = float(model(**batch).item())
    hyps = greedy_decode(
        model, batch["src"], batch["src_ext"], batch["src_mask"], max_len=batch["tgt_out"].shape[1]
    )
    refs = [[t for t in row if t not in (IGNORE_INDEX, EOS)] for row in batch["tgt_out"].tolist()]
    totals = {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
    for ref, hyp in zip(refs, hyps, strict=True):
        for key, value in rouge(ref, hyp).items():
            totals[key] += value
    return {"loss": loss, **{k: v / max(len(refs), 1) for k, v in totals.items()}}


def _make_batch(
    args: Mapping[str, Any], batch_size: int, seq_len: int, generator: torch.Generator
) -> Batch:
    """Full-length sources with 0-4 OOV words each, and targets that copy half their
    words from the source (OOVs included) and draw the rest from the vocabulary."""
    V, T, S, B = int(args["vocab_size"]), int(args.get("tgt_len", 192)), seq_len, batch_size
    src = torch.randint(len(SPECIAL_TOKENS), V, (B, S), generator=generator)
    src_ext = src.clone()
    n_oov = torch.randint(0, 5, (B,), generator=generator).clamp(max=S)
    for b in range(B):
        k = int(n_oov[b])
        pos = torch.randperm(S, generator=generator)[:k].sort().values  # OOV i: i-th seen
        src[b, pos] = UNK
        src_ext[b, pos] = V + torch.arange(k)
    copy = torch.rand(B, T - 1, generator=generator) < 0.5
    copied = src_ext.gather(1, torch.randint(0, S, (B, T - 1), generator=generator))
    fresh = torch.randint(len(SPECIAL_TOKENS), V, (B, T - 1), generator=generator)
    words = torch.where(copy, copied, fresh)  # (B, T-1) extended ids
    return {
        "src": src,
        "src_ext": src_ext,
        "src_mask": torch.ones(B, S, dtype=torch.bool),
        "tgt_in": torch.cat([torch.full((B, 1), BOS), words.masked_fill(words >= V, UNK)], 1),
        "tgt_out": torch.cat([words, torch.full((B, 1), EOS)], dim=1),
        "n_oov": n_oov,
    }


@functools.lru_cache(maxsize=32)
def _param_split(frozen: tuple[Any, ...]) -> tuple[int, int, int]:
    """(per source token, per target token, per sample) matmul parameters."""
    with torch.device("meta"):
        model = PointerGenerator(**dict(frozen))

    def n(*mods: nn.Module) -> int:
        return sum(p.numel() for m in mods for p in m.parameters())

    per_src = n(model.encoder, model.enc_proj)
    per_sample = n(model.reduce_h, model.reduce_c)
    per_tgt = n(model) - n(model.embedding) - per_src - per_sample
    return per_src, per_tgt, per_sample


def _flops(args: Mapping[str, Any], seq_len: int) -> float:
    """6 x parameters touched per token x tokens (encoder on the source, decoder and output
    layer on the target), plus the additive attention: per target step and source position
    the score (``v``: A), the context (2H) and, with coverage, its feature (A) multiply-adds."""
    per_src, per_tgt, per_sample = _param_split(tuple(sorted(args.items())))
    T, S = int(args.get("tgt_len", 192)), seq_len
    enc_dim = 2 * int(args.get("hidden", 256))
    attn_macs = enc_dim + enc_dim + (enc_dim if args.get("coverage", False) else 0)
    return 6.0 * (per_src * S + per_tgt * T + per_sample + attn_macs * S * T)


def _tokens(args: Mapping[str, Any], seq_len: int) -> int:
    return seq_len + int(args.get("tgt_len", 192))


def pointer_gen_spec() -> ModelSpec:
    return ModelSpec(
        name="pointer-gen",
        description="pointer-generator summarizer: BiLSTM encoder, attentive LSTM decoder, copy",
        task="seq2seq",
        family="pointer-gen",
        build_fn=PointerGenerator,
        make_batch_fn=_make_batch,
        loss_fn=_loss,
        flops_fn=_flops,
        tokens_fn=_tokens,
        args={
            "vocab_size": 20_000,
            "emb_dim": 128,
            "hidden": 256,
            "enc_layers": 2,
            "chunk_len": 128,
            "max_chunks": 6,
            "tgt_len": 192,
            "coverage": False,
            "coverage_weight": 1.0,
        },
        seq_len=768,
        max_seq_len=768,
        global_batch=16,
        supports_checkpointing=True,
        throughput_unit="tokens",
        extras={
            "with_args": _with_args,
            "metric": _metric,
            "greedy_decode": greedy_decode,
            "beam_search": beam_search,
            "rouge": rouge,
            "encode_example": encode_example,
        },
    )


def _with_args(spec: ModelSpec, args: dict[str, Any]) -> ModelSpec:
    """The spec with ``args``, its length limit the source the model takes (chunk_len *
    max_chunks), and its default length where that no longer fits: with max_chunks=3 the
    spec kept 768 and every trial's source was refused."""
    chunk, chunks = args.get("chunk_len"), args.get("max_chunks")
    if not (type(chunk) is int and type(chunks) is int and chunk > 0 and chunks > 0):
        return dataclasses.replace(spec, args=args)  # the build says what is wrong
    longest = chunk * chunks
    return dataclasses.replace(spec, args=args, max_seq_len=longest,
                               seq_len=min(spec.seq_len, longest))  # fmt: skip


register("pointer-gen", pointer_gen_spec)
