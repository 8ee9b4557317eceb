"""A self-contained HTML page that gathers a run's summary numbers and figures."""

from __future__ import annotations

import html
import math
import os
from pathlib import Path
from urllib.parse import quote

from markovformer.plots.saving import write_text
from markovformer.strict_json import strict_dumps

_STYLE = """
body { font-family: sans-serif; margin: 2em auto; padding: 0 1em; max-width: 1150px; color: #222; }
table { border-collapse: collapse; margin-bottom: 2em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.8em; text-align: left; }
th { background: #f3f3f3; }
figure { margin: 0 0 2.5em 0; }
figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { margin-top: 0.4em; font-style: italic; }
details { margin-bottom: 2em; }
pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; }
"""


def _format(value: object) -> str:
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.6g}"
    return str(value)


def write_html_report(
    out_dir: Path,
    title: str,
    figures: list[tuple[str, Path]],
    summary: dict[str, object] | None = None,
    config_text: str | None = None,
    sample: tuple[str, str] | None = None,
) -> Path:
    """Write ``out_dir/index.html`` atomically and return its path.

    The page shows ``title``, a key/value table of ``summary`` (floats to 6 significant digits) and each
    ``(caption, path)`` figure in order (a ``(caption, path, numbers)`` one shows its JSON-able ``numbers``, the
    values it draws, in a folded block under it), linked by its path relative to ``out_dir`` so the folder can be
    moved or served as is. ``config_text`` (the run's config.yaml) follows the table in a folded block; ``sample``
    (heading, text), a generated sample, follows it as preformatted text. Every caption, key,
    value and the title are HTML-escaped. Raises FileNotFoundError for a figure that does not exist (the page would
    show a broken image).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        '<head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{_STYLE}</style>",
        "</head>",
        "<body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    if summary:
        parts.append("<table><tr><th>quantity</th><th>value</th></tr>")
        for key, value in summary.items():
            parts.append(f"<tr><td>{html.escape(str(key))}</td><td>{html.escape(_format(value))}</td></tr>")
        parts.append("</table>")
    if config_text:
        parts.append(f"<details><summary>the run's config (config.yaml)</summary><pre>{html.escape(config_text)}</pre>"
                     "</details>")  # fmt: skip
    if sample:
        parts.append(f"<h2>{html.escape(sample[0])}</h2><pre>{html.escape(sample[1])}</pre>")
    for caption, path, *numbers in figures:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"figure {path} (caption {caption!r}) does not exist")
        relative = Path(os.path.relpath(path.resolve(), out_dir.resolve())).as_posix()
        source = html.escape(quote(relative), quote=True)
        parts.append(
            f'<figure><a href="{source}"><img src="{source}" alt="{html.escape(caption, quote=True)}"></a>'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        )
        if numbers and numbers[0]:
            text = strict_dumps(numbers[0], indent=1)  # a nan: null
            parts.append(f"<details><summary>the numbers drawn above (JSON)</summary><pre>{html.escape(text)}</pre>"
                         "</details>")  # fmt: skip
    parts += ["</body>", "</html>", ""]
    return write_text("\n".join(parts), out_dir / "index.html")
