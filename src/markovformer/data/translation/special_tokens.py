"""Special tokens with fixed ids in every translation vocabulary: ``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2, ``<unk>`` 3
(MarkovTranslatorConfig's defaults). Byte-level BPE encodes any text, so ``<unk>`` is reserved but never produced.
Both the tokenizer/loader (``parallel.py``) and the batching (``batching.py``) read them from here."""

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")
PAD_TOKEN_ID, BOS_TOKEN_ID, EOS_TOKEN_ID, UNK_TOKEN_ID = range(len(SPECIAL_TOKENS))
