"""The baseline zoo as sequence-mixer kinds of the Markovian Transformer's blocks (issue 9, "Baselines").

Each is registered in ``layers.registry`` under a config string, so ``MarkovianTransformerConfig(attention=...)``
(one kind, or one per layer) gives that baseline with the same embeddings, FFN, norms and heads:

| kind        | paper                                   | module                | causal | non-causal            |
|-------------|-----------------------------------------|-----------------------|--------|-----------------------|
| "softmax"   | Vaswani et al. 2017                     | layers.softmax_attention | yes | yes                   |
| "rff"       | Performer (Choromanski et al. 2021)/RFA | layers.random_feature_attention | yes | yes          |
| "linformer" | Wang et al. 2020                        | ``LinformerAttention`` | refused | yes (needs max_position) |
| "s4d"       | Gu et al. 2022 (S4D-Lin)                | ``S4DMixer``          | yes    | forward + backward SSM |
| "retnet"    | Sun et al. 2023 (multi-scale retention) | ``RetNetAttention``   | yes    | γ^{abs(n-m)} decay     |
| "h3"        | Fu et al. 2023 (shift + diagonal SSM)   | ``H3Mixer``           | yes    | two-sided FIR, both SSMs |
| "hyena"     | Poli et al. 2023 (order 2)              | ``HyenaMixer``        | yes    | two-sided filters     |
| "rwkv"      | Peng et al. 2023 (RWKV-4 time mix)      | ``RWKVTimeMix``       | yes    | bidirectional WKV     |
| "gru"       | Cho et al. 2014                         | ``GRUMixer``          | yes    | bidirectional GRU     |
| "scan"      | Scan Markov gated linear recurrence     | ``ScanMixer``         | yes    | forward + backward    |

No PyPI package was used: none of the maintained implementations (state-spaces, fla, rwkv) is installed, and
most need CUDA kernels. Each module names the paper it follows and where it departs from the authors' code.
Their sequence kernels live in ``ops`` beside their naive twins (``ops.long_conv``, ``ops.s4d``, ``ops.retention``,
``ops.wkv``, ``ops.scan``). Every mixer zeroes padded positions in and out (``ops.padding.zero_padding``) and accepts
padding at either end of a row (the GRU kind included: it refuses only padding between real tokens).
"""

from markovformer.layers.baselines.h3 import H3Mixer
from markovformer.layers.baselines.hyena import HyenaMixer
from markovformer.layers.baselines.linformer import LinformerAttention
from markovformer.layers.baselines.recurrent import GRUMixer, ScanMixer
from markovformer.layers.baselines.retnet import RetNetAttention
from markovformer.layers.baselines.rwkv import RWKVTimeMix
from markovformer.layers.baselines.s4d import S4DMixer

__all__ = [
    "GRUMixer",
    "H3Mixer",
    "HyenaMixer",
    "LinformerAttention",
    "RWKVTimeMix",
    "RetNetAttention",
    "S4DMixer",
    "ScanMixer",
]
