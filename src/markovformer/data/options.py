"""One line per data-source option, for markovformer data show NAME: what data.<option> in a run config
means. OPTION_HELP holds the meaning shared by every source that has the option; SOURCE_OPTION_HELP the
few that differ by source. A test keeps every option of every source described."""

from __future__ import annotations

_CHAIN_ONLY = "(kind={kind} only)"
# trainer.seed is the data's seed too: it draws generated examples and splits records at random
_DRAWN = ", drawn from trainer.seed (another seed, other {what})"
_SPLIT_AT_RANDOM = ("train, validation and test shares of the {what} (they sum to 1), split at random by trainer.seed "
                    "(another seed, another split)")

# Options that change only how training draws its examples, and the value that reads the data as it is: eval scores
# each record once (not its reverse complement too) and the training text in contiguous windows (not one window per
# start token, seq_len times the text).
TRAINING_ONLY_OPTIONS = {"reverse_complement": False, "window_starts": "contiguous"}

OPTION_HELP: dict[str, str] = {
    # Markov-chain sources
    "kind": "the chain: lagged (log-linear in the symbols at lags), random (Dirichlet rows) or switching (binary)",
    "num_symbols": "alphabet size",  # the chain sources': below
    "lags": "the symbols the next one depends on, as steps back from it (1 = the previous symbol) "
    + _CHAIN_ONLY.format(kind="lagged"),
    "strength": "how strongly the next symbol depends on the lagged ones " + _CHAIN_ONLY.format(kind="lagged"),
    "order": "the chain's order " + _CHAIN_ONLY.format(kind="random"),
    "beta": "Dirichlet concentration of each transition row " + _CHAIN_ONLY.format(kind="random"),
    "p": "P(0 -> 1) of the switching chain " + _CHAIN_ONLY.format(kind="switching"),
    "q": "P(1 -> 0) of the switching chain " + _CHAIN_ONLY.format(kind="switching"),
    "chain_seed": "seed that draws the chain (the same seed, the same chain in every run)",
    "train_sequences": "number of training sequences" + _DRAWN.format(what="sequences"),
    "val_sequences": "number of validation sequences" + _DRAWN.format(what="sequences"),
    "test_sequences": "number of test sequences" + _DRAWN.format(what="sequences"),
    "seq_len": "tokens per training window",
    # files
    "path": "the data file",
    "fractions": "train, validation and test shares of the data (in order; they sum to 1)",
    "tokenizer": "char (one token per character) or bpe (byte-level BPE trained on the training part)",
    "vocab_size": "BPE vocabulary size, required with tokenizer: bpe (null with char: the characters seen)",
    "overlap": "tokens of unscored context each window carries from the previous one (exact n-gram scoring)",
    "labels": "the labels file: id<TAB>label or id,label, one line per FASTA record, after at most one header line "
    "(a first line whose id is no record)",
    "reverse_complement": "add each training sequence's reverse complement (DNA is read from either strand; "
    "eval scores the records alone)",
    "max_length": "each sequence cut to its first max_length bases, no record dropped (the run's data line says how "
    "many it cut; null: whole sequences)",
    "reference": "the reference genome FASTA the intervals are cut from (plain or .gz)",
    "label_column": "the column holding the label",
    "feature_columns": "the numeric columns used as features (null: every column but the label)",
    "window": "rows per example (sliding window)",
    "stride": "rows between the starts of consecutive windows (below window, token classification's training labels a "
    "row in every window holding it; validation, test and eval score each row once, in its first window)",
    "task": "sequence_classification (one label per window) or token_classification (one per row)",
    "horizon": "snapshots ahead over which the smoothed mid-price move is labelled",
    "threshold": "relative move that counts as up or down, or a pair [low, high] (null: thresholds that balance the "
                 "training classes; eval on another file takes the run's)",
    "test_set": "recorded (the real recordings) or synthetic (voices unseen in training)",
    "stack_frames": "consecutive feature frames joined into one input (k: k times the features, 1/k the length)",
    "sample_rate": "audio sample rate the WAV files are resampled to (Hz)",
    "target_path": "the aligned target-language file, when path holds only the source side",
    # synthetic tasks
    "input_dim": "features per frame",
    "min_symbols": "fewest symbols per string",
    "max_symbols": "most symbols per string",
    "noise": "standard deviation of the noise added to every frame",
    "train_examples": "number of training examples" + _DRAWN.format(what="examples"),
    "val_examples": "number of validation examples" + _DRAWN.format(what="examples"),
    "test_examples": "number of test examples" + _DRAWN.format(what="examples"),
    "source_symbols": "source-language alphabet size",
    "target_symbols": "target-language alphabet size",
    "min_length": "fewest words per sentence",
    "table_seed": "seed that draws the task's lookup table",
    # state-space sources
    "state_dim": "dimension of the hidden state",
    "obs_dim": "dimension of each observation",
    "decay": "per-step shrinkage of the state (its transition's spectral radius)",
    "rotation": "per-step rotation angle of the state (radians)",
    "process_std": "standard deviation of the state noise",
    "obs_std": "standard deviation of the observation noise",
    "model_seed": "seed that draws the model's parameters",
    "doc_len": "steps per document",
    "train_documents": "number of training documents" + _DRAWN.format(what="documents"),
    "val_documents": "number of validation documents" + _DRAWN.format(what="documents"),
    "test_documents": "number of test documents" + _DRAWN.format(what="documents"),
    "num_states": "number of hidden states",
    "stay": "probability of keeping the hidden state for one more step",
    "concentration": "Dirichlet concentration of each state's emission distribution",
}

SOURCE_OPTION_HELP: dict[tuple[str, str], str] = {
    **{(source, "fractions"): _SPLIT_AT_RANDOM.format(what=what) for source, what in (
        ("fasta", "records"), ("bed", "intervals"), ("translation_file", "sentence pairs"),
        ("audio_manifest", "utterances"))},  # fmt: skip
    **{(source, "num_symbols"): "alphabet size " + _CHAIN_ONLY.format(kind="lagged or random")
       + "; a switching chain has 2" for source in ("markov_chain", "hidden_order")},  # fmt: skip
    ("synthetic_translation", "order"): "true order of the target side: y_i depends on the previous order targets",
    ("synthetic_translation", "max_length"): "most words per sentence",
    ("synthetic_translation", "vocab_size"): "joint BPE vocabulary size (large enough that every word is one token)",
    ("synthetic_ctc", "num_symbols"): "number of distinct symbols (labels 1..num_symbols; 0 is the CTC blank)",
    ("sticky_hmm", "num_symbols"): "number of emitted symbols",
    ("translation_file", "path"): "a TSV of source<TAB>target lines, or the source side with target_path",
    ("translation_file", "vocab_size"): "joint BPE vocabulary size",
    ("translation_file", "max_length"): "training pairs with more tokens than this on either side are left out; "
                                        "val and test are kept whole (null: no limit)",
    ("speech_features", "path"): "the .safetensors file markovformer data prepare digits writes",
    ("audio_manifest", "path"): "a manifest of path<TAB>transcript lines, paths relative to it",
    ("csv_series", "label_column"): "name of the label column; labels are classes (strings or integers): bin a "
                                    "numeric target such as a return into classes (e.g. up/down) first",
    ("csv_series", "label_leads"): "rows ahead a row's label looks (1: the next row's move, whose return is that "
                                   "row's feature); token classification then needs a causal model, and the labels "
                                   "of a split's last label_leads rows (made of the next split's) are left out",
    ("bed", "path"): "the BED file of labelled intervals",
    ("bed", "label_column"): "1-based BED column holding the label (4 = the name)",
    ("text", "path"): "a UTF-8 text file (data/NAME is looked up in $MARKOVFORMER_DATA, else ./data), or a directory "
    "or glob of files, each one document",
    ("text", "fractions"): "train, validation and test shares of the text (in order; they sum to 1): one file is "
                           "cut at those shares of its characters; a folder's files, or with documents a file's "
                           "records, go whole to a part, by their bytes",
    ("text", "cache_dir"): "where token stores are cached ('': $MARKOVFORMER_CACHE, else "
                           "$XDG_CACHE_HOME/markovformer/token_stores, ~/.cache/markovformer/token_stores by default)",
    ("text", "fit_bytes"): "bytes of the train part BPE merges are learned on, sampled evenly (char reads it all)",
    ("text", "window_starts"): "contiguous (windows tile each split) or random (training windows start at any token, "
    "drawn per trainer.seed and step, as nanoGPT; over many passes it overfits far later)",
    ("text", "packing"): "examples carry position_ids restarting at each document (documents packed, no padding); "
                         "every layer keeps each document to itself, positions restart, and each document's first "
                         "token is not scored (so generate needs a prompt: the model cannot start a document)",
    ("text", "documents"): "file (each file is one document), jsonl (each line's JSON record), blank_line (each "
    "paragraph) or fasta (each record's bases, its header and line breaks dropped: the same tokens at any line "
    "width): records are documents, closed by an end-of-document token",
    ("text", "text_column"): "the JSONL field holding a record's text",
    ("text", "fold_case"): "documents: fasta only: read soft-masked (lowercase) bases as uppercase, so acgt and ACGT "
                           "are one symbol each (false: the repeat mask is kept, lowercase letters are symbols of "
                           "their own)",
    ("text", "seq_len"): "tokens each window predicts: a window holds seq_len + 1 tokens, the inputs and, one on, "
                         "the targets",
    ("hf_dataset", "seq_len"): "tokens each window predicts (a window holds seq_len + 1, as for the text source)",
    ("hf_dataset", "data_files"): "local JSONL, Parquet, CSV or Arrow files (paths, directories or globs; no hub "
    "names, no URLs)",
    ("hf_dataset", "fractions"): "train, validation and test shares of the rows, by count whatever their lengths "
                                 "(in order; they sum to 1): the text source with documents: jsonl splits the same "
                                 "file by bytes",
    ("hf_dataset", "text_column"): "the column holding each row's text (each row is a document)",
    ("hf_dataset", "num_proc"): "processes datasets.map tokenizes with (null: the cores available)",
    ("hf_dataset", "cache_dir"): "where token stores are cached (as for the text source)",
    ("hf_dataset", "fit_bytes"): "bytes of train rows BPE merges are learned on, rows spread evenly",
    ("hf_dataset", "window_starts"): "contiguous or random training window starts (as for the text source)",
    ("hf_dataset", "packing"): "examples carry position_ids restarting at each row (as for the text source)",
    ("fasta", "path"): "the FASTA file of DNA sequences (A/C/G/T/N), plain or gzipped (.gz), or a glob of such files "
                       "(chr*.fa: their records in one, the files in sorted order)",
    # the sequence-mixer tasks (data/synthetic/tasks.py)
    ("mqar", "seq_len"): "tokens per example (even; 4 * num_pairs <= seq_len < vocab_size)",
    ("mqar", "num_pairs"): "key-value pairs stated first, then each key queried once",
    ("mqar", "vocab_size"): "keys come from the lower half of the vocabulary, values from the upper half",
    ("mqar", "power_a"): "exponent of the power law that spreads queries away from their pairs (Zoology's 0.01)",
    ("induction", "seq_len"): "tokens per example; the trigger's second occurrence is the second-to-last token",
    ("induction", "vocab_size"): "vocabulary size (token 0 is the trigger)",
    ("selective_copy", "seq_len"): "tokens per example: the noisy context, the markers and the copied tokens",
    ("selective_copy", "num_tokens"): "data tokens scattered among noise, to be reproduced in order after the marker",
    ("selective_copy", "vocab_size"): "vocabulary size (0 is noise, 1 the marker, the rest data tokens)",
    ("icl_markov", "seq_len"): "tokens per sequence (each sequence has its own randomly drawn chain)",
    ("icl_markov", "order"): "order of every drawn chain",
    ("icl_markov", "num_symbols"): "alphabet size",
    ("icl_markov", "beta"): "Dirichlet concentration of each drawn transition row",
}


def option_help(source: str, option: str) -> str:
    """What data.<option> means for source; KeyError, saying where to add one, for an option nobody described (a test
    forbids it)."""
    described = SOURCE_OPTION_HELP.get((source, option)) or OPTION_HELP.get(option)
    if described is None:
        raise KeyError(f"data.{option} of source {source!r} has no help line: add ({source!r}, {option!r}) to "
                       f"SOURCE_OPTION_HELP, or {option!r} to OPTION_HELP if it means the same for every source, in "
                       f"markovformer/data/options.py")  # fmt: skip
    return described
