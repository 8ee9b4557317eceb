"""Installation as users install: `pip install markovformer` gives a working command, the core stays slim, and a
missing package is named on one line with the pip command that installs it."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the dev extra's tomli, the same parser
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
COMMAND_PACKAGES = ("lightning", "torchmetrics", "yaml", "matplotlib", "tokenizers", "tensorboard", "sacrebleu")
CORE = "import markovformer, markovformer.ops, markovformer.layers, markovformer.models, markovformer.markov"


def _python(code: str, blocked: tuple[str, ...], cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter where importing any of ``blocked`` fails as if it were not installed."""
    block = f"import sys\nfor name in {blocked!r}:\n    sys.modules[name] = None\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", block + code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def test_core_imports_and_runs_with_torch_numpy_and_safetensors_alone():
    code = (
        f"{CORE}\nimport torch\nfrom markovformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM\n"
        "model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=5, d_model=8, n_layers=1, "
        "n_heads=2, max_order=2))\nprint(model(torch.zeros(1, 6, dtype=torch.long)).logits.shape)\n"
        f"print(sorted(set({COMMAND_PACKAGES!r}) & {{m.split('.')[0] for m in sys.modules if sys.modules[m]}}))"
    )
    done = _python(code, COMMAND_PACKAGES)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["torch.Size([1, 6, 5])", "[]"]


def test_a_command_without_its_dependency_names_it_and_the_install_command_on_one_line(tmp_path):
    code = f"from markovformer.cli.main import main\nsys.exit(main(['train', 'output_dir={tmp_path / 'run'}']))"
    done = _python(code, ("lightning",), cwd=tmp_path)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "'lightning'" in lines[0] and "pip install markovformer" in lines[0]
    assert not (tmp_path / "run").exists()


def test_a_source_without_its_extra_names_the_package_and_the_extra_on_one_line(tmp_path, monkeypatch):
    from conftest import run_in_process  # the command in this process: the reader imports datasets late

    (tmp_path / "rows.jsonl").write_text('{"text": "ab"}\n')
    monkeypatch.setitem(sys.modules, "datasets", None)  # importing it fails as if it were not installed
    done = run_in_process("train", "text_char", "data.source=hf_dataset", "data.data_files=rows.jsonl",
                          f"output_dir={tmp_path / 'run'}", cwd=tmp_path)  # fmt: skip
    assert (done.returncode, done.stderr) == (
        2, "markovformer: error: this command needs the package 'datasets': pip install \"markovformer[datasets]\"\n")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("package", "load", "line"),
    [("tokenizers", "markovformer.data.readers.tokenizer:_import_tokenizers",
      "this command needs the package 'tokenizers', a dependency of markovformer's command line: pip install "
      "markovformer (or `make setup` in a clone) installs it"),
     ("sacrebleu", "markovformer.data.translation.bleu:corpus_bleu",
      "this command needs the package 'sacrebleu', a dependency of markovformer's command line: pip install "
      "markovformer (or `make setup` in a clone) installs it"),
     ("pyfaidx", "markovformer.data.readers.fasta:import_pyfaidx",
      "this command needs the package 'pyfaidx': pip install \"markovformer[data]\""),
     ("datasets", "markovformer.data.readers.hf_dataset:_import_datasets",
      "this command needs the package 'datasets': pip install \"markovformer[datasets]\"")],
    ids=["tokenizers", "sacrebleu", "pyfaidx", "datasets"],
)  # fmt: skip
def test_every_package_imported_where_it_is_used_is_a_missing_package_to_the_command(monkeypatch, package, load, line):
    """Each reader that imports its package late says so itself; the command must still see a missing package (exit
    status 2 and the one line), not a bug's traceback."""
    import importlib

    from markovformer.cli.errors import EXIT_BAD_INPUT, error_message, exit_status

    module, name = load.split(":")
    function = getattr(importlib.import_module(module), name)
    monkeypatch.setitem(sys.modules, package, None)  # importing it now fails as if it were not installed
    with pytest.raises(ImportError) as caught:
        function(["a b"], ["a b"]) if name == "corpus_bleu" else function()
    assert package in str(caught.value)
    assert (exit_status(caught.value), error_message(caught.value)) == (EXIT_BAD_INPUT, line)


def test_a_recipe_package_is_named_with_the_data_extra():
    from markovformer.cli.errors import missing_package_message

    message = missing_package_message(ModuleNotFoundError("No module named 'rdata'", name="rdata"))
    assert message == "this command needs the package 'rdata': pip install \"markovformer[data]\""


def test_the_command_dependencies_are_core_dependencies_of_the_package():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    required = {spec.split(">")[0].split("=")[0].strip() for spec in project["dependencies"]}
    import_names = {"yaml": "pyyaml"}
    assert {import_names.get(name, name) for name in COMMAND_PACKAGES} <= required


def _floor(package: str, extra: str | None = None) -> tuple[int, ...]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = project["optional-dependencies"][extra] if extra else project["dependencies"]
    spec = next(spec for spec in specs if spec.startswith(f"{package}>="))
    return tuple(int(part) for part in spec.split(">=")[1].split(",")[0].split("."))


def test_the_lightning_floor_saves_the_step_checkpoints_a_validation_defers():
    """StepCheckpoints defers a validated step's checkpoint through ModelCheckpoint's `_defer_save_until_validation`,
    which lightning has since 2.5.5; with an older one every such step-NNNNNN.ckpt went unwritten, silently."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    assert hasattr(ModelCheckpoint(), "_defer_save_until_validation")
    assert _floor("lightning") >= (2, 5, 5)


def test_the_safetensors_floor_reads_a_checkpoint_of_numbers(tmp_path):
    """A checkpoint of numbers alone is a file of no tensor, which safetensors 0.4.3 could not read back
    (InvalidHeaderDeserialization)."""
    from markovformer.training.checkpoint import load_checkpoint_file, save_checkpoint_file

    save_checkpoint_file({"step": 3}, tmp_path / "numbers.ckpt")
    assert load_checkpoint_file(tmp_path / "numbers.ckpt") == {"step": 3}
    assert _floor("safetensors") >= (0, 4, 4)


def test_the_tokenizers_floor_encodes_a_literal_special_token_as_a_character_tokenizer_does():
    """hf_backend() is documented as giving the tokenizer's own ids; with tokenizers 0.15.0 it gave others for text
    holding a literal "<eod>" or "<pad>" ([4, 1, 10, 1, 9, ...] for [4, 1, 2, 6, 7, ...]); 0.15.1 gives the same."""
    from markovformer.data.readers.tokenizer import CharTokenizer

    tokenizer = CharTokenizer("<>eodpa x", end_of_document=True)
    assert tokenizer.hf_backend().encode("a <eod> x <pad> d").ids == tokenizer.encode("a <eod> x <pad> d")
    assert _floor("tokenizers") >= (0, 15, 1)


def test_the_hf_extra_admits_no_accelerate_that_transformers_trainer_refuses():
    """transformers 5 runs its Trainer only with accelerate >= its ACCELERATE_MIN_VERSION (1.1.0 from 5.0.0 on); the
    extra's floor 0.26 let `pip install "markovformer[hf]"` keep an accelerate 0.26-1.0 that the Trainer refuses."""
    import_utils = pytest.importorskip("transformers.utils.import_utils")
    needed = tuple(int(part) for part in import_utils.ACCELERATE_MIN_VERSION.split("."))
    floor = _floor("accelerate", "hf")
    assert floor + (0,) * (len(needed) - len(floor)) >= needed


@pytest.mark.slow
def test_a_built_wheel_installs_a_working_command_into_a_new_venv(tmp_path):
    """Build the wheel, read its requirements, install it (no downloads) into a new venv that sees the shared venv's
    packages, and run the installed `markovformer` console script from outside the repository."""
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip"]
    build = subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(ROOT)],
                           capture_output=True, text=True, timeout=600)  # fmt: skip
    assert build.returncode == 0, build.stderr
    wheel = next(wheels.glob("markovformer-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    unconditional = {r.split(">")[0].split(";")[0].strip().lower() for r in requires if "extra ==" not in r}
    assert {"torch", "lightning", "matplotlib", "pyyaml", "tokenizers"} <= unconditional
    shipped = {n for n in names if n.startswith("markovformer/configs/") and n.endswith(".yaml")}
    assert "markovformer/configs/text_char.yaml" in shipped and len(shipped) >= 15
    assert "markovformer/py.typed" in names  # PEP 561: a user's type checker reads the annotations

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # pip and the venv must not see a source tree
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    install = subprocess.run([*pip, "--python", str(venv / "bin" / "python"), "install", "--no-deps", "--no-index",
                              str(wheel)], env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    if install.returncode != 0 and "no such option: --python" in install.stderr:
        pytest.skip("this pip cannot install into another interpreter (--python needs pip >= 22.3)")
    assert install.returncode == 0, install.stderr
    # Only now let the venv see the shared packages (torch, lightning, ...): pip must not see the shared venv's
    # markovformer as already installed, and must never touch that venv.
    site = next((venv / "lib").glob("python*/site-packages"))
    shared = next(p for p in map(Path, sys.path) if p.name == "site-packages" and (p / "torch").is_dir())
    (site / "shared.pth").write_text(f"{shared}\n")
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import markovformer; print(markovformer.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert where.stdout.startswith(str(site)), where.stdout + where.stderr
    shown = subprocess.run([str(venv / "bin" / "markovformer"), "data", "show", "markov_chain"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    assert shown.returncode == 0 and "entropy rate" in shown.stdout, shown.stderr
    # The README's commands name configs/NAME.yaml: outside a clone they read the configs the wheel ships.
    listed = subprocess.run([str(venv / "bin" / "markovformer"), "config", "show", "text_char"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert listed.returncode == 0 and listed.stdout.startswith("# Character-level"), listed.stderr
    typo = subprocess.run([str(venv / "bin" / "markovformer"), "train", "configs/causal_lm_chain.yaml",
                           "trainer.max_stepz=3"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert typo.returncode == 2 and "trainer.max_stepz" in typo.stderr, typo.stderr
