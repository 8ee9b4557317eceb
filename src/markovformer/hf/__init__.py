"""Hugging Face integration (the ``hf`` extra: ``pip install "markovformer[hf]"``).

``import markovformer.hf`` registers every markovformer config with ``transformers.AutoConfig`` and each model
with the Auto class of its task (``AutoModel``, ``AutoModelForCausalLM``, ``AutoModelForSequenceClassification``,
``AutoModelForTokenClassification``, ``AutoModelForCTC``, ``AutoModelForSeq2SeqLM``), as flash-linear-attention
does. Then::

    import markovformer.hf  # noqa: F401
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained("runs/NAME/model")   # a run's model/ or any save_pretrained

loads the saved weights into a ``transformers.PreTrainedModel`` that wraps the markovformer model (the same
modules, so the same state-dict keys and the same logits), usable with ``transformers``' ``generate`` and
``Trainer``. The core package never imports ``transformers``. Loading is strict: a checkpoint that lacks some of
the model's parameters or holds others raises ValueError unless ``strict=False`` is passed (see
``markovformer.hf.wrapper.Wrapper.from_pretrained``).
"""

# The transformers releases the wrappers are tested with (their Cache and loading APIs change between majors); the
# `hf` extra in pyproject.toml pins the same range.
SUPPORTED_TRANSFORMERS = (5, 6)  # >= 5.0, < 6

try:
    import transformers
except ImportError as error:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError('markovformer.hf needs transformers: pip install "markovformer[hf]"') from error


def check_transformers_version(version: str) -> None:
    """ImportError naming the supported range unless ``version`` (transformers') lies in it."""
    major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else -1
    low, high = SUPPORTED_TRANSFORMERS
    if not low <= major < high:
        raise ImportError(f"markovformer.hf supports transformers >={low}.0,<{high} but {version} is installed: "
                          f'pip install "transformers>={low}.0,<{high}"')  # fmt: skip


def check_transformers_runs_torch() -> None:
    """ImportError in one line where transformers has turned its models off: it needs a newer torch than this one."""
    if transformers.utils.is_torch_available():
        return
    import importlib.metadata
    import re

    import torch

    needs = [match.group(1) for requirement in importlib.metadata.requires("transformers") or []
             if (match := re.match(r"torch\s*([<>=!~][^;]*)", requirement))]  # fmt: skip
    raise ImportError(f"markovformer.hf needs transformers' models, but transformers {transformers.__version__} "
                      f"needs torch{needs[0] if needs else ' (a newer release)'} and torch {torch.__version__} is "
                      "installed: upgrade torch, or install an older transformers release that runs it")  # fmt: skip


check_transformers_version(transformers.__version__)
check_transformers_runs_torch()

from markovformer.hf.cache import MarkovformerCache  # noqa: E402
from markovformer.hf.modeling import HF_CLASSES, HF_CONFIGS, register  # noqa: E402
from markovformer.hf.tokenizer import export_tokenizer, to_transformers  # noqa: E402

register()

__all__ = ["HF_CLASSES", "HF_CONFIGS", "SUPPORTED_TRANSFORMERS", "MarkovformerCache", "check_transformers_runs_torch",
           "check_transformers_version", "export_tokenizer", "register", "to_transformers"]
