"""How a run talks about lags, in one convention everywhere (console, tables, figures, the HTML report).

The convention is the attention lag ``k = t - j``: the key ``k`` tokens before the query. A next-token model
predicts x_{t+1} at position t, so a chain whose next symbol depends on the symbol ``l`` steps back (the data's lag
``l``) is read at attention lag ``l - 1`` (``ops.lags.prediction_lags``); lag 0 is the query token itself, which
attention always sees and which never gets a Markov bias. Only lags >= 1 can show up in the learned strengths and
gates, and those are the ones marked.
"""

from __future__ import annotations

from collections.abc import Sequence

from markovformer.ops.lags import prediction_lags

CONVENTION = ("lag k = t \u2212 j: the key k tokens before the query t; lag 0, the query token itself, gets no Markov "
              "bias")


def chain_attention_lags(data_lags: Sequence[int]) -> tuple[int, ...]:
    """The data's lags (symbols back from the predicted one) as attention lags of the predicting position."""
    return tuple(sorted(prediction_lags(tuple(data_lags))))


def biased_lags(data_lags: Sequence[int]) -> tuple[int, ...]:
    """The attention lags >= 1 a chain depends on: those its learned biases and gates should pick."""
    return tuple(lag for lag in chain_attention_lags(data_lags) if lag >= 1)


def describe_chain(data_lags: Sequence[int]) -> str:
    """One sentence: which inputs the next token depends on, as attention lags, and which of them get a bias."""
    lags = chain_attention_lags(data_lags)
    inputs = ", ".join("x_t" if lag == 0 else f"x_(t\u2212{lag})" for lag in lags)
    marked = biased_lags(data_lags)
    if len(marked) > 1:
        biased = f"lags {', '.join(map(str, marked))} are the ones a Markov bias can pick"
    else:
        biased = f"lag {marked[0]} is the one a Markov bias can pick" if marked else "no Markov bias is needed"
    return f"x_(t+1) depends on {inputs}: attention lags {', '.join(map(str, lags))}; {biased}"


def lag_header(max_order: int, marked: Sequence[int], sign: str = "") -> list[str]:
    """Column labels ``1 2* 3 ...`` for lags 1..max_order, ``*`` on the marked ones (``sign`` "−" for the future)."""
    return [f"{sign}{lag}{'*' if lag in marked else ''}" for lag in range(1, max_order + 1)]
