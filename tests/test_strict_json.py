"""Reading the JSON files a run, a saved model, a token store or an experiment folder keeps: a damaged file is one
ValueError naming it, never a traceback from a caller's ``.get`` on a list."""

import pytest

from markovformer.strict_json import read_json_object


@pytest.mark.parametrize(
    ("content", "said"),
    [(b"[1, 2]", "it holds a JSON list, not an object"), (b'"text"', "it holds a JSON str, not an object"),
     (b"{not json", "not valid JSON"), (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
     (b'{"a": "\xff"}', "not valid JSON")],
    ids=["list", "string", "not-json", "nested-too-deeply", "not-utf-8"],
)  # fmt: skip
def test_a_file_without_a_json_object_is_one_error_naming_it(tmp_path, content, said):
    path = tmp_path / "record.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"record.json: not a test record: {said}"):
        read_json_object(path, "a test record")


def test_a_json_object_is_returned_as_it_is(tmp_path):
    path = tmp_path / "record.json"
    path.write_text('{"steps": 3, "name": "Grüße", "nested": {"a": [1, 2.5, null]}}', encoding="utf-8")
    assert read_json_object(path, "a test record") == {"steps": 3, "name": "Grüße", "nested": {"a": [1, 2.5, None]}}


def test_a_missing_file_raises_its_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_json_object(tmp_path / "absent.json", "a test record")


def test_an_experiment_folder_whose_marker_holds_a_list_is_refused_naming_it(tmp_path):
    """`experiment NAME --out FOLDER` whose experiment.json held '[]' ended in AttributeError: 'list' object has no
    attribute 'get'."""
    from markovformer.experiments.report import claim_folder

    (tmp_path / "experiment.json").write_text("[]", encoding="utf-8")
    with pytest.raises(ValueError, match="experiment.json: not an experiment folder's marker: it holds a JSON list"):
        claim_folder(tmp_path, "mat-order")


def test_a_token_store_whose_record_holds_a_list_is_refused_naming_it(tmp_path):
    from markovformer.data.readers.token_store import META_FILE, TokenStore

    (tmp_path / META_FILE).write_text("[]", encoding="utf-8")
    with pytest.raises(ValueError, match=f"{META_FILE}: not a token store's record: it holds a JSON list"):
        TokenStore(tmp_path)
