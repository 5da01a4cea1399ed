"""docs/errors.md is what tools/gen_errors_doc.py writes from the code: it cannot drift.

After a change to a refusal message: python tools/gen_errors_doc.py
"""

from __future__ import annotations

from pathlib import Path

from ansible_collections.gpusplit.k8s.tests.unit.tool_module import load_tool

ROOT = Path(__file__).resolve().parents[2]


GEN = load_tool("gen_errors_doc")


def test_docs_errors_md_is_generated_from_the_code():
    text = GEN.render()
    assert text == GEN.render()  # the same code gives the same page
    current = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    assert current == text, "docs/errors.md is out of date: run python tools/gen_errors_doc.py"


def test_the_page_lists_refusals_of_every_capability():
    text = GEN.render()
    for title, _, _ in GEN.CAPABILITIES:
        assert f"\n## {title}\n" in text, title
    assert "\n## Other\n" not in text, "a file with refusals belongs to no capability: add it to CAPABILITIES"
    # messages of this issue, as the reader sees them
    assert "- `<host>: node_name (gpusplit_node_name) <node_name> is not a Kubernetes node name" in text
    assert "- `<at>: <pattern>: <what> (relative paths start at <os.getcwd()>)`\n" in text
    assert "- `<path>: not valid YAML: <_yaml_problem(exc)>`\n" in text


def test_the_page_names_no_private_file():
    """The collection's files are private (docs/dev/architecture.md): the page is indexed by capability and message."""
    text = GEN.render()
    for private in ("plugins/", "module_utils", "plugin_utils"):
        assert private not in text, private
    assert "(role `gpusplit.k8s.gpu_plan`, task: " in text


def test_a_message_with_no_words_of_its_own_is_left_out():
    assert not GEN.findable("<path>: <message>")
    assert not GEN.findable("{% for r in results %}<r.msg>{% endfor %}")
    assert GEN.findable("<host>: split.count <n> is more than the usable GPUs")
    text = GEN.render()
    assert "- `<path>: <message>`" not in text
    assert "- `nvidia-smi --query-gpu printed nothing`\n" in text


def test_messages_are_in_alphabetical_order_within_a_capability():
    text = GEN.render()
    for section in text.split("\n## ")[2:]:
        if section.startswith(GEN.YAML_TITLE):
            continue
        messages = [line[2:] for line in section.splitlines() if line.startswith("- ")]
        assert messages, section.splitlines()[0]
        assert messages == sorted(messages, key=lambda m: GEN._message_key(m.strip("`").strip())), section[
            :40
        ]


def test_a_message_is_read_from_each_kind_of_site(tmp_path):
    source = """
class ThingError(GpusplitError):
    pass

def check(value, errors):
    if value is None:
        raise ThingError(f"value: expected a string, got {type_name(value)}")
    errors.append(f"{value}: unknown " + "thing")
    problems = []
    problems += [f"{item}: bad" for item in value]
    module.fail_json(msg="nothing to do")
    raise OtherError(f"not a refusal {value}")

def shape_problem(value):
    return f"{', '.join(value)} is not a shape"
"""
    import ast

    tree = ast.parse(source)
    collector = GEN.Collector(GEN.refusal_classes({Path("x.py"): tree}))
    collector.visit(tree)
    assert collector.found == [
        ("check", "value: expected a string, got <type>"),
        ("check", "<value>: unknown thing"),
        ("check", "<item>: bad"),
        ("check", "nothing to do"),
        ("shape_problem", "<value> is not a shape"),
    ]
