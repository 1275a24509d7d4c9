"""The docs runner itself (tests/docs/docrun.py), on made-up pages: what runs, in which order and
where, what is only shown, background servers, skips, and how a failure is reported."""
from __future__ import annotations

import socket
import textwrap

import pytest

from tests.docs import docrun


def page(tmp_path, text: str, name: str = "page.md"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text), encoding="utf-8")
    return p


def test_blocks_run_in_order_in_one_directory_and_python_blocks_share_a_namespace(tmp_path):
    p = page(tmp_path, '''
        # A page

        ```python
        from pathlib import Path
        Path("first.txt").write_text("one")
        counter = 1
        ```

        ```sh
        test "$(cat first.txt)" = one
        echo two > second.txt
        command -v rmqstore
        ```

        ```text
        this is shown, never run: exit 1
        ```

        ```python
        counter += 1
        assert Path("second.txt").read_text() == "two\\n"
        assert counter == 2
        ```
    ''')
    ran = docrun.run_page(p, tmp_path / "work")
    assert [b.lang for b in ran] == ["python", "sh", "python"]
    assert [b.line for b in ran] == [5, 11, 21]


def test_a_failing_sh_block_names_page_line_and_output(tmp_path):
    p = page(tmp_path, '''
        intro

        ```sh
        echo before
        echo "the reason" >&2
        false
        echo never
        ```
    ''')
    with pytest.raises(docrun.BlockFailed) as e:
        docrun.run_page(p, tmp_path / "work", name="docs/x.md")
    msg = str(e.value)
    assert msg.startswith("docs/x.md:5: the ```sh block exited 1")
    assert "before" in msg and "the reason" in msg and "never" not in msg.split("--- its output ---")[1]


def test_a_failing_python_block_points_at_the_page_line(tmp_path):
    p = page(tmp_path, '''
        ```python
        x = 1
        ```

        ```python
        print("some output")
        y = 2
        raise ValueError(f"bad {x + y}")
        ```
    ''')
    with pytest.raises(docrun.BlockFailed) as e:
        docrun.run_page(p, tmp_path / "work", name="p.md")
    msg = str(e.value)
    assert msg.startswith("p.md:7: the ```python block raised")
    assert 'File "p.md", line 9' in msg and "ValueError: bad 3" in msg and "some output" in msg


def test_a_background_server_is_waited_for_moved_to_a_free_port_and_killed(tmp_path):
    p = page(tmp_path, '''
        <!-- run: background -->
        ```sh
        python -c 'import sys, http.server as h; host, port = sys.argv[1].split(":"); h.HTTPServer((host, int(port)), h.SimpleHTTPRequestHandler).serve_forever()' 127.0.0.1:8765
        ```

        ```python
        import urllib.request
        assert urllib.request.urlopen("http://127.0.0.1:8765/").status == 200
        ```

        ```sh
        python -c "import os; open('pid', 'w').write(str(os.getppid()))"
        ```
    ''')
    blocks = docrun.parse(p.read_text(), "p.md")
    assert docrun.addresses(blocks[0].code) == [("127.0.0.1", 8765)]
    ran = docrun.run_page(p, tmp_path / "work")
    [(_, port)] = docrun.addresses(ran[0].code)
    assert port != 8765 and f"127.0.0.1:{port}/" in ran[1].code  # the same free port on the whole page
    with socket.socket() as s:  # the server is gone after the page
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_a_background_block_that_ends_early_fails_with_its_output(tmp_path):
    p = page(tmp_path, '''
        <!-- run: background -->
        ```sh
        echo "cannot start on 127.0.0.1:8766"; exit 3
        ```
    ''')
    with pytest.raises(docrun.BlockFailed, match=r"(?s)p.md:4: .*ended \(exit 3\).*cannot start"):
        docrun.run_page(p, tmp_path / "work", name="p.md")


def test_skip_needs_a_reason_and_leaves_the_block_out(tmp_path):
    p = page(tmp_path, '''
        <!-- run: skip (needs a cluster) -->
        ```sh
        exit 1
        ```
    ''')
    assert docrun.run_page(p, tmp_path / "w1") == []
    with pytest.raises(docrun.DocsError, match="needs its reason"):
        docrun.parse("<!-- run: skip -->\n```sh\nexit 1\n```\n", "p.md")


@pytest.mark.parametrize("text, error", [
    ("```\nrmqstore stats\n```\n", "without a language"),
    ("```yaml\na: 1\n```\n", "'yaml' is neither run"),
    ("<!-- run: background -->\n```sh\nsleep 100\n```\n", "must name the HOST:PORT"),
    ("<!-- run: background -->\n```python\nx = 1\n```\n", "only a sh block"),
    ("<!-- run: later -->\n```sh\ntrue\n```\n", "unknown run directive"),
    ("<!-- run: skip (why) -->\n```json\n{}\n```\n", "which is not run"),
    ("```sh\ntrue\n", "never closed"),
])
def test_pages_that_break_the_convention_are_refused(text, error):
    with pytest.raises(docrun.DocsError, match=error):
        docrun.parse(text, "p.md")


def test_indented_blocks_and_tildes_are_found():
    blocks = docrun.parse("- item\n\n    ```python\n    x = 1\n    ```\n\n~~~sh\necho hi\n~~~\n", "p.md")
    assert [(b.lang, b.line, b.code) for b in blocks] == [("python", 4, "x = 1\n"), ("sh", 8, "echo hi\n")]
