"""Data recipes: ``markovformer data prepare NAME`` downloads or unpacks a public data set (a URL, a Debian package,
speech synthesised with espeak-ng) and writes it, converted, into the data directory (``locations``), where a config
reads it as ``data/NAME``.

``registry`` holds ``DATA_RECIPES`` and ``find_prepared_file`` (a missing file's error names the recipe that writes
it). The tools: ``debian`` (``apt-get download`` + ``dpkg -x`` into a temporary folder) and ``espeak``. The data sets:
``shakespeare``, ``de_en`` (the Ding dictionary), ``genomics`` (splice, promoters; also the ``bed`` source's
reader), ``finance`` (daily bars; also the ``order_book`` source's reader) and ``speech`` (spoken digits; also the
readers of its feature file and of WAV manifests).

To add one: a module here with ``prepare_NAME(out_path) -> Path`` that writes atomically (nothing half-written on
failure; ``markovformer.atomic``), and an entry in ``registry.DATA_RECIPES``. A format other data could share
belongs in ``readers/``; a recipe imports readers, never the other way round.
"""
