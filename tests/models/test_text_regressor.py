"""Text regressor: SMAPE, padding masked out, numeric features used."""

from __future__ import annotations

import pytest
import torch
from _tiny_models import TINY

from autotune.models import get_model
from autotune.models.text_regressor import smape

SPEC = TINY["text-regressor"].spec


def test_smape_values() -> None:
    t = torch.tensor
    assert smape(t([1.0, 2.0]), t([1.0, 2.0])).item() == 0.0
    assert smape(t([1.0]), t([3.0])).item() == pytest.approx(100.0)  # 2*2/(1+3)
    assert smape(t([0.0]), t([5.0])).item() == pytest.approx(200.0)  # the worst case
    assert smape(t([0.0, 1.0]), t([0.0, 3.0])).item() == pytest.approx(50.0)  # 0/0 counts as 0
    with pytest.raises(ValueError, match="shapes"):
        smape(t([1.0]), t([1.0, 2.0]))


def test_predictions_ignore_padding_and_use_numeric_features() -> None:
    torch.manual_seed(0)
    model = SPEC.build()
    batch = SPEC.make_batch(batch_size=4, seq_len=24)
    mask = batch["attention_mask"]
    assert (~mask).any(), "the synthetic batch should have padded rows"
    assert mask[0].all(), "and one full row"
    pred = model(batch["input_ids"], mask, batch["numeric"])
    assert pred.shape == (4,)
    junk = batch["input_ids"].masked_fill(~mask, 5)
    torch.testing.assert_close(model(junk, mask, batch["numeric"]), pred)
    assert not torch.allclose(model(batch["input_ids"], mask, batch["numeric"] + 1.0), pred)


def test_metric_reports_smape_on_the_price_scale() -> None:
    torch.manual_seed(0)
    model = SPEC.build()
    batch = SPEC.make_batch(batch_size=4, seq_len=24)
    with torch.no_grad():
        pred = model(batch["input_ids"], batch["attention_mask"], batch["numeric"])
    metrics = SPEC.extras["metric"](model, batch)
    expected = smape(torch.expm1(pred), torch.expm1(batch["target"])).item()
    assert metrics["smape"] == pytest.approx(expected, rel=1e-5)
    assert metrics["loss"] > 0 and metrics["mae"] > 0


def test_named_size_and_flops() -> None:
    spec = get_model("text-regressor")
    assert spec.max_seq_len == 384 and spec.throughput_unit == "samples"
    assert spec.tokens_per_sample() == 1
    d, L, T = 256, spec.args["n_layers"], spec.seq_len
    per_layer = 4 * d * d + 3 * d * 704 + 2 * d
    low = 6 * L * per_layer * T + 12 * L * d * T * T
    assert low < spec.flops_per_sample() < low * 1.01  # plus the numeric MLP and the head
