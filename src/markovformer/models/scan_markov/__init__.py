"""The scan Markov model: config, causal LM with incremental decoding and generation."""

from markovformer.models.scan_markov.config import CONTEXT_MODES, ScanMarkovConfig
from markovformer.models.scan_markov.modeling import ScanMarkovForCausalLM, ScanMarkovOutput

__all__ = ["CONTEXT_MODES", "ScanMarkovConfig", "ScanMarkovForCausalLM", "ScanMarkovOutput"]
