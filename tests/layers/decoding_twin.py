"""The check that a layer's incremental decoding reproduces its full forward (imported as ``decoding_twin``: pytest
puts this folder on the path): a prefill of some positions, then the rest one or two at a time."""

import torch


def assert_decoding_matches_full_forward(layer, x: torch.Tensor, mask: torch.Tensor | None, prefill: int,
                                         step: int = 1) -> None:  # fmt: skip
    """``layer(x[:, :prefill], state=s)`` then ``step`` positions per call == ``layer(x)`` at every position."""
    full = layer(x, attention_mask=mask)
    state: dict = {}
    pieces, start = [], 0
    for end in [prefill, *range(prefill + step, x.shape[1] + step, step)]:
        end = min(end, x.shape[1])
        if end <= start:
            continue
        part_mask = None if mask is None else mask[:, start:end]
        pieces.append(layer(x[:, start:end], attention_mask=part_mask, state=state))
        start = end
    got = torch.cat(pieces, dim=1)
    if mask is not None:  # padded queries' outputs are not defined to agree; real ones are
        got, full = got * mask[..., None], full * mask[..., None]
    torch.testing.assert_close(got, full, rtol=1e-9, atol=1e-9)
