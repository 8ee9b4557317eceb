"""The WKV operator of RWKV-4 (Peng et al. 2023 §3.3), per channel c with decay w > 0 and bonus u:

    wkv_t = (Σ_{i<t} e^{-(t-1-i)w + k_i} v_i + e^{u+k_t} v_t) / (Σ_{i<t} e^{-(t-1-i)w + k_i} + e^{u+k_t})

Three forms, pinned together by the tests:

- ``wkv_naive``: the sums as written, dense (T×T), causal or bidirectional; the reference (overflows for large k);
- ``wkv_recurrent``: the authors' numerically stable recurrence, one step at a time; causal only;
- ``wkv_scan``: the same stabilisation in parallel form on ``linear_scan``, causal or bidirectional, with padding;
  what the layer runs.
"""

from markovformer.ops.wkv.naive import wkv_naive
from markovformer.ops.wkv.recurrent import wkv_recurrent
from markovformer.ops.wkv.scan import wkv_scan

__all__ = ["wkv_naive", "wkv_recurrent", "wkv_scan"]
