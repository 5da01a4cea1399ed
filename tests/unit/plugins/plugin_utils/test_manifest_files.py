"""Reading manifests for the lint: a path that names nothing or a file that is not YAML is refused
by name (issue 18, cases 1 and 14)."""

from __future__ import annotations

import pytest

from ansible_collections.gpusplit.k8s.plugins.plugin_utils.manifest_files import ManifestError, read_manifests

POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}\n"


def refusal(paths, **kwargs):
    with pytest.raises(ManifestError) as err:
        read_manifests(paths, **kwargs)
    return err.value.errors


def test_a_string_is_one_path_not_its_characters(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.yaml").write_text(POD + "---\n" + POD.replace("name: p", "name: q"))
    assert [m["metadata"]["name"] for m in read_manifests("bad.yaml")] == ["p", "q"]
    assert read_manifests(["bad.yaml", "*.yaml"]) == read_manifests("bad.yaml")  # a file is read once


def test_globs_expand_in_order_and_empty_documents_are_skipped(tmp_path):
    for name in ("b.yaml", "a.yaml"):
        (tmp_path / name).write_text(f"---\n---\nkind: ConfigMap\nmetadata: {{name: {name[0]}}}\n")
    got = read_manifests(str(tmp_path / "*.yaml"))
    assert [m["metadata"]["name"] for m in got] == ["a", "b"]


def test_a_glob_or_path_that_matches_nothing_is_refused_naming_it(tmp_path):
    (tmp_path / "a.yaml").write_text(POD)
    errors = refusal(
        [str(tmp_path / "a.yaml"), str(tmp_path / "nothing-*.yaml"), "missing.yaml"], field="lint_paths"
    )
    assert errors[0].startswith(f"lint_paths[1]: '{tmp_path}/nothing-*.yaml': matches no file")
    assert errors[1].startswith("lint_paths[2]: 'missing.yaml': no such file")


@pytest.mark.parametrize(
    ("paths", "msg"),
    [
        ([], "gpusplit_lint_paths: names no file; give a path or glob such as deploy/*.yaml"),
        (3, "gpusplit_lint_paths: expected a path or glob, or a list of them, got integer"),
        (None, "gpusplit_lint_paths: expected a path or glob, or a list of them, got null"),
        ({"a": 1}, "gpusplit_lint_paths: expected a path or glob, or a list of them, got mapping"),
        ("", "gpusplit_lint_paths: expected a path or glob, got string ''"),
        ([["a"]], "gpusplit_lint_paths: expected a path or glob, got list [['a']]"),
    ],
)
def test_paths_of_the_wrong_shape_are_refused(paths, msg):
    assert refusal(paths, field="gpusplit_lint_paths")[0].startswith(msg.split(" [[")[0])


def test_broken_yaml_names_the_file_line_and_problem(tmp_path):
    (tmp_path / "broken.yaml").write_text("kind: Pod\nmetadata: [\n")
    (msg,) = refusal(str(tmp_path / "broken.yaml"))
    assert msg.startswith(f"{tmp_path}/broken.yaml: not valid YAML: line 3, column 1: ")
    assert "while parsing a flow" in msg and "CapturedExceptionMarker" not in msg


def test_every_bad_file_is_named_at_once(tmp_path):
    (tmp_path / "latin1.yaml").write_bytes(b"kind: Pod\nmetadata: {name: caf\xe9}\n")
    (tmp_path / "list.yaml").write_text("- kind: Pod\n")
    (tmp_path / "dir.yaml").mkdir()
    errors = refusal(str(tmp_path / "*.yaml"))
    assert errors == [
        f"paths: {tmp_path}/dir.yaml is a directory; name its files, e.g. {tmp_path}/dir.yaml/*.yaml",
        f"{tmp_path}/latin1.yaml is not UTF-8 text: byte 0xe9 on line 2, column 21 is no UTF-8 character; "
        "save the file as UTF-8",
        f"{tmp_path}/list.yaml: document 1: expected a Kubernetes object (a mapping), got list",
    ]


def test_files_without_any_object_are_refused(tmp_path):
    """The class behind case 1: "no findings" only when something was read."""
    (tmp_path / "empty.yaml").write_text("---\n# nothing\n")
    (msg,) = refusal(str(tmp_path / "empty.yaml"))
    assert msg == f"paths: {tmp_path}/empty.yaml hold(s) no Kubernetes object; nothing to lint"


def test_an_unreadable_file_is_named(tmp_path):
    path = tmp_path / "gone.yaml"
    path.symlink_to(tmp_path / "deleted.yaml")  # listed by the glob, not readable
    (msg,) = refusal(str(tmp_path / "*.yaml"))
    assert msg == f"cannot read {path}: No such file or directory"
