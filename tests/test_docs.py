"""The docs stay true: docs/configuration.md is generated from the settings, every setting is
documented, the README stays a short guide whose contents resolve, and no relative link in the
README or docs/ points nowhere. No MPI is started."""
import dataclasses
import pathlib
import re
import subprocess
import sys

import pytest

from hvlite import config

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CONFIG_PAGE = DOCS / "configuration.md"
README_MAX_LINES = 260
REGENERATE = "regenerate it with: python -m hvlite.config > docs/configuration.md"


# ---- markdown helpers -------------------------------------------------------------------------

def prose_lines(text):
    """The lines outside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())   # [text](link) -> text
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(text):
    """Every heading's anchor, with GitHub's -1, -2 suffixes for repeats."""
    seen, out = {}, set()
    for line in prose_lines(text):
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            a = slug(m.group(1))
            n = seen.get(a, 0)
            seen[a] = n + 1
            out.add(a if n == 0 else f"{a}-{n}")
    return out


LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def links(text):
    """Link targets outside code (inline code spans are dropped first)."""
    out = []
    for line in prose_lines(text):
        out += LINK.findall(re.sub(r"`[^`]*`", "", line))
    return out


def broken_links(path, text=None):
    """Relative links in `path` whose file, or whose anchor in a markdown file, is missing."""
    text = path.read_text() if text is None else text
    bad = []
    for target in links(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):        # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            bad.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(
                text if dest == path else dest.read_text()):
            bad.append(f"{target} (no heading with that anchor)")
    return bad


def contents_section(text):
    """The README's table of contents: the list under its "Contents" heading."""
    lines = prose_lines(text)
    for i, line in enumerate(lines):
        if re.match(r"#{2,3}\s+(table of )?contents\s*$", line, re.I):
            body = []
            for rest in lines[i + 1:]:
                if rest.startswith("#"):
                    break
                body.append(rest)
            return "\n".join(body)
    return None


def pages():
    return [README] + sorted(DOCS.glob("*.md"))


# ---- the configuration page -------------------------------------------------------------------

def test_configuration_page_is_generated_from_the_settings():
    assert CONFIG_PAGE.exists(), f"docs/configuration.md is missing; {REGENERATE}"
    assert CONFIG_PAGE.read_text() == config.markdown(), \
        f"docs/configuration.md is out of date with hvlite/config.py; {REGENERATE}"


def test_the_documented_command_prints_the_page_without_starting_mpi():
    run = subprocess.run([sys.executable, "-m", "hvlite.config"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout == CONFIG_PAGE.read_text(), REGENERATE
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, hvlite.config as c; c.markdown(); "
         "sys.exit('mpi4py.MPI' in sys.modules)"], cwd=ROOT, capture_output=True, text=True,
        timeout=120)
    assert probe.returncode == 0, "rendering the configuration page imported mpi4py.MPI"


def test_every_setting_is_documented():
    assert config.undocumented() == [], \
        f"Settings fields without env=/doc= metadata: {config.undocumented()}"
    envs = [f.metadata["env"] for f in dataclasses.fields(config.Settings)]
    assert len(envs) == len(set(envs)), "two Settings fields claim the same variable"


def test_a_field_without_a_doc_is_caught(monkeypatch):
    @dataclasses.dataclass(frozen=True)
    class Partial:
        documented: int = config._setting(1, "HVLITE_DOCUMENTED", "has a doc")
        bare: int = 0

    monkeypatch.setattr(config, "Settings", Partial)
    assert config.undocumented() == ["bare"]
    with pytest.raises(ValueError, match="bare"):
        config.markdown()


def _other_value(f):
    """A valid value for field f other than its default, as (environment string, parsed)."""
    meta, d = f.metadata, f.default
    if "choices" in meta:
        v = next(c for c in meta["choices"] if c != d)
        return v, v
    if "accepts" in meta:                 # the tristate: auto or a boolean
        return "1", "1"
    if isinstance(d, bool):
        return ("0", False) if d else ("1", True)
    if isinstance(d, int):
        return str(d + 1), d + 1
    if isinstance(d, float):
        return repr(d * 2), d * 2
    return "elsewhere.out", "elsewhere.out"


@pytest.mark.parametrize("field", dataclasses.fields(config.Settings), ids=lambda f: f.name)
def test_the_documented_variable_sets_its_field(field):
    raw, want = _other_value(field)
    env = field.metadata["env"]
    assert getattr(config.load({env: raw}), field.name) == want, \
        f"{env}={raw} does not set Settings.{field.name}: the doc names the wrong variable"
    alias = config.ALIASES.get(env)
    if alias:
        assert getattr(config.load({alias: raw}), field.name) == want


def test_every_variable_config_reads_is_on_the_page():
    source = pathlib.Path(config.__file__).read_text()
    page = config.markdown()
    names = set(re.findall(r"\b(?:HVLITE|HOROVOD)_[A-Z0-9_]*[A-Z0-9]\b", source))
    missing = sorted(n for n in names if f"`{n}`" not in page and not n.endswith("_"))
    assert not missing, f"read in hvlite/config.py but not documented: {missing}"


# ---- the README -------------------------------------------------------------------------------

def test_readme_is_a_short_guide():
    n = len(README.read_text().splitlines())
    assert n <= README_MAX_LINES, \
        f"README.md has {n} lines (at most {README_MAX_LINES}); move detail into docs/"


def test_readme_contents_resolve_to_headings():
    text = README.read_text()
    toc = contents_section(text)
    assert toc is not None, "README.md has no 'Contents' section"
    targets = re.findall(r"\]\(#([^)]+)\)", toc)
    assert len(targets) >= 4, "the README's contents list links to too few sections"
    missing = [t for t in targets if t not in anchors(text)]
    assert not missing, f"README contents entries without a heading: {missing}"
    top = {slug(line[3:]) for line in prose_lines(text) if line.startswith("## ")}
    top.discard("contents")
    assert top <= set(targets), f"sections missing from the README's contents: {top - set(targets)}"


def test_readme_keeps_the_two_commands():
    text = README.read_text()
    assert "make demo" in text and "make test" in text


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
    bad = broken_links(page)
    assert not bad, f"{page.relative_to(ROOT)}: broken links: {bad}"


def test_the_link_and_contents_checks_can_fail(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# There\n\n## A `code` heading\n")
    text = ("# Title\n\n## Contents\n\n- [Here](#here)\n- [Gone](#gone)\n\n## Here\n\n"
            "[ok](there.md#a-code-heading) [bad file](missing.md) [bad anchor](there.md#nope) "
            "[web](https://example.org/x) `[in code](nowhere.md)`\n\n"
            "```\n[in a block](nowhere.md)\n## not a heading\n```\n")
    page.write_text(text)
    assert broken_links(page) == ["#gone (no heading with that anchor)",
                                  "missing.md (no such file)",
                                  "there.md#nope (no heading with that anchor)"]
    assert anchors(text) == {"title", "contents", "here"}
    toc = contents_section(text)
    assert [t for t in re.findall(r"\]\(#([^)]+)\)", toc) if t not in anchors(text)] == ["gone"]
    assert slug("Ops, dtypes, algorithms") == "ops-dtypes-algorithms"
    assert slug("hvlite.torch") == "hvlitetorch"
