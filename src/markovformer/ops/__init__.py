"""Pure tensor functions. Each op has a naive reference beside its fast paths; tests pin every path to naive."""

from markovformer.ops.lag_bias_attention import lag_bias_attention
from markovformer.ops.lags import dense_lag_bias, lag_matrix, lag_slot, visible
from markovformer.ops.linear_attention import linear_attention
from markovformer.ops.masked_softmax import masked_softmax

__all__ = [
    "lag_bias_attention",
    "dense_lag_bias",
    "lag_matrix",
    "lag_slot",
    "linear_attention",
    "masked_softmax",
    "visible",
]
