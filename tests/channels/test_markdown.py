"""Markdown to Telegram HTML, checked against the fake Bot API's strict HTML parser."""

from __future__ import annotations

import pytest

from channels.telegram.markdown import balance_fence, balance_fences, markdown_to_html
from tests.fakes.telegram_html import HTMLParseError, parse_telegram_html


@pytest.mark.parametrize(("source", "expected"), [
    ("plain text", "plain text"),
    ("**bold** and __bold__", "<b>bold</b> and <b>bold</b>"),
    ("*it* and _it_", "<i>it</i> and <i>it</i>"),
    ("~~gone~~", "<s>gone</s>"),
    ("`x < y && z`", "<code>x &lt; y &amp;&amp; z</code>"),
    ("a < b > c & d", "a &lt; b &gt; c &amp; d"),
    ("<b>raw</b> <script>", "&lt;b&gt;raw&lt;/b&gt; &lt;script&gt;"),
    ("[site](https://example.com/?a=1&b=2)", '<a href="https://example.com/?a=1&amp;b=2">site</a>'),
    ("[bad](javascript:alert(1))", "[bad](javascript:alert(1))"),
    ("[rel](/path)", "rel"),
    ("# Title\n\nbody", "<b>Title</b>\n\nbody"),
    ("line one\nline two", "line one\nline two"),
    ("snake_case_name and 2 * 3", "snake_case_name and 2 * 3"),
    ("- a\n- b\n  - c", "• a\n• b\n  • c"),
    ("3. x\n4. y", "3. x\n4. y"),
    ("> quoted", "<blockquote>quoted</blockquote>"),
    ("```python\nif a < b:\n    pass\n```", '<pre><code class="language-python">if a &lt; b:\n    pass</code></pre>'),
    ("```\nno lang\n```", "<pre>no lang</pre>"),
    ("    indented code", "<pre>indented code</pre>"),
    ("| a | b |\n|---|---|\n| 1 | 2 |", "<pre>| a | b |\n|---|---|\n| 1 | 2 |</pre>"),
    ("above\n\n---\n\nbelow", "above\n\n——————\n\nbelow"),
    ("![cat](https://x.org/c.png)", '<a href="https://x.org/c.png">cat</a>'),
])
def test_render(source, expected):
    html = markdown_to_html(source)
    assert html == expected
    parse_telegram_html(html)  # Telegram would accept it


def test_unclosed_markup_is_still_valid_html():
    for source in ["**unclosed bold", "```py\nnever closed", "_half", "[link](", "<", "&", "`"]:
        parse_telegram_html(markdown_to_html(source))


def test_attribute_quotes_are_escaped():
    html = markdown_to_html('[x](https://e.com/"onmouseover=1)')
    assert html == '<a href="https://e.com/%22onmouseover=1">x</a>'
    parse_telegram_html(html)


def test_balance_fence():
    assert balance_fence("text\n```js\nlet a") == ("text\n```js\nlet a\n```", "```js")
    assert balance_fence("let b\n```\nafter", "```js") == ("```js\nlet b\n```\nafter", "")
    assert balance_fence("no fences") == ("no fences", "")
    assert balance_fences(["a\n~~~\nx", "y", "z\n~~~"]) == ["a\n~~~\nx\n~~~", "~~~\ny\n~~~", "~~~\nz\n~~~"]


def test_strict_parser_rejects_what_telegram_rejects():
    for bad in ["<b>open", "a < b", "x & y", "<div>x</div>", "<b><i>x</b></i>", "a > b"]:
        with pytest.raises(HTMLParseError):
            parse_telegram_html(bad)
    assert parse_telegram_html('<a href="u">l</a> &lt;&amp;&gt;&quot;&#33;') == 'l <&>"!'


def test_plain_lines_skip_the_parser_and_render_as_the_parser_would():
    """The shortcut for plain one-line replies gives what the parser gives, on every string it takes."""
    import random

    from channels.telegram import markdown

    def parsed(text: str) -> str:
        return markdown._Renderer(text.splitlines()).blocks(
            markdown.SyntaxTreeNode(markdown._MD.parse(text)).children, "\n\n").strip("\n")

    alphabet = list("ab Z9.,:;!?=+-#>()'\"/%@$^{}\t\n\x00\u00a0你好") + list("\\`*_~[]<>&|") + ["1. ", "- ", "&amp;"]
    rng = random.Random(14)
    taken = 0
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
        if markdown._PLAIN.fullmatch(text):
            taken += 1
            assert markdown_to_html(text) == parsed(text), repr(text)
    assert taken > 1000  # the corpus exercises the shortcut
    for reply in ("Sure!", "echo: c1 m0", "Hello, world! How are you?", "你好，世界", "x=1 (see above)"):
        assert markdown._PLAIN.fullmatch(reply), reply
    for markup in ("1. x", "- x", "# x", "a *b*", "a<b", "x ", "line\nline", "a | b"):
        assert not markdown._PLAIN.fullmatch(markup), markup
