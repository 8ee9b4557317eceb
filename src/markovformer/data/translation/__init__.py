"""Translation data: parallel text and the joint BPE tokenizer (``parallel``), the fixed ids of the special tokens
(``special_tokens``), length-bucketed batches (``batching``), a synthetic task of known order (``synthetic``), and
corpus BLEU and chrF (``bleu``; sacrebleu, imported when used). The German-English recipe is ``recipes.de_en``."""

from markovformer.data.translation.batching import LengthBucketSampler, collate_translation, translation_lengths
from markovformer.data.translation.bleu import BootstrapBleu, corpus_bleu, corpus_chrf, paired_bootstrap_bleu
from markovformer.data.translation.parallel import (
    check_translation_tokenizer,
    decode_generated,
    encode_pairs,
    load_translation,
    load_translation_tokenizer,
    one_line,
    read_parallel,
    text_lines,
    train_translation_tokenizer,
    translation_bundle,
)
from markovformer.data.translation.special_tokens import (
    BOS_TOKEN_ID,
    EOS_TOKEN_ID,
    PAD_TOKEN_ID,
    SPECIAL_TOKENS,
    UNK_TOKEN_ID,
)
from markovformer.data.translation.synthetic import SyntheticTranslationSource

__all__ = [
    "BOS_TOKEN_ID",
    "BootstrapBleu",
    "EOS_TOKEN_ID",
    "LengthBucketSampler",
    "PAD_TOKEN_ID",
    "SPECIAL_TOKENS",
    "SyntheticTranslationSource",
    "UNK_TOKEN_ID",
    "check_translation_tokenizer",
    "collate_translation",
    "corpus_bleu",
    "corpus_chrf",
    "decode_generated",
    "encode_pairs",
    "load_translation",
    "load_translation_tokenizer",
    "one_line",
    "paired_bootstrap_bleu",
    "read_parallel",
    "text_lines",
    "train_translation_tokenizer",
    "translation_bundle",
    "translation_lengths",
]
