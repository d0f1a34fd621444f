"""Deprecated alias: ``autotune.models.spec`` is ``autotune.contract.spec`` since the
contract moved out of the model zoo.

A model file written against the old path (``from autotune.models.spec import
ModelSpec``) still imports: this module hands over the new one, the same objects, with a
``DeprecationWarning`` naming where to import from now (``from autotune import
ModelSpec, Knob, Batch``, or ``autotune.contract.spec`` for the rest).
"""

from __future__ import annotations

import sys
import warnings

from autotune.contract import spec as _contract_spec

warnings.warn(
    "autotune.models.spec is deprecated: import ModelSpec, Knob and Batch from autotune "
    "(from autotune import ModelSpec), or anything else from autotune.contract.spec",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _contract_spec
