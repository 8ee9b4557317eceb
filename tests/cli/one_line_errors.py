"""The one-line error a command gives on bad input, as the test_cli_*.py files check it: exit status 2, one
``markovformer: error:`` line holding the fragments, and no traceback."""


def assert_one_line_error(done, *fragments: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout[-500:], done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("markovformer: error:"), done.stderr
    assert "Traceback" not in done.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
