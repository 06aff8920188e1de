"""The documentation stays true to the repository: every code path a page cites exists, every relative link
resolves, every `docs/design.md, "Section"` a file cites names a section there, the generated scenario-field
reference matches the schema, and the two pages that must stay short do (issue 31: a 756-line README and a 265 KB
design.md that no one could hold, with claims the code no longer matched)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted([ROOT / "README.md", *DOCS.glob("*.md"), ROOT / "benchmarks" / "README.md",
                *(ROOT / "examples").glob("**/README.md")])
README_MAX_LINES = 300
DESIGN_MAX_BYTES = 80_000

# A repository path as pages cite it: one of the top-level folders, then path characters. Not preceded by a path
# character, so `torch-chaos/golden` (a cache directory) and `chaos-runs/` are not read as `chaos/...`.
CITED = re.compile(r"(?<![\w./~-])((?:chaos|tests|scenarios|workloads|benchmarks|examples)/[\w./<>*{}-]*)")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
# `docs/design.md, "Section"` (or `design.md "Section"`), in any file, the quotes possibly across a line break.
SECTION_CITE = re.compile(r"design\.md`?,?\s*\(?\"([^\"]{1,100})\"")


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def prose(text: str) -> str:
    """The page without its fenced code blocks (commands and output, not links)."""
    return FENCE.sub("", text)


def exists(cited: str) -> bool:
    """Whether a cited path names something in the repository: placeholders (`<kind>`, `*`) match any name."""
    cited = cited.rstrip(".,:;")
    if "{" in cited:  # a brace list of names in one directory: the directory must exist
        cited = cited[:cited.index("{")]
    pattern = re.sub(r"<[^>]*>", "*", cited)
    if "*" in pattern:
        return any(ROOT.glob(pattern.rstrip("/")))
    return (ROOT / pattern).exists() or (ROOT / f"{pattern}.py").exists()  # a module named without its suffix


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_code_path_a_page_cites_exists(page: Path) -> None:
    missing = sorted({c for c in CITED.findall(page.read_text()) if not exists(c)})
    assert not missing, f"{rel(page)} cites paths that do not exist: {missing}"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped but hyphens, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(m) for m in re.findall(r"^#+ (.*)$", prose(page.read_text()), re.M)}


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(target)
    assert not broken, f"{rel(page)} links to what does not exist: {broken}"


def test_the_readme_is_short_enough_to_read() -> None:
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; reference material belongs in docs/"


def test_the_design_is_short_enough_to_hold() -> None:
    size = (DOCS / "design.md").stat().st_size
    assert size <= DESIGN_MAX_BYTES, f"docs/design.md is {size} bytes; move reference material to its own page"


def test_the_docs_index_lists_every_page() -> None:
    index = (DOCS / "README.md").read_text()
    listed = set(LINK.findall(index))
    pages = {p.name for p in DOCS.iterdir() if p.suffix in {".md", ".yml"} and p.name != "README.md"}
    assert pages - listed == set(), f"docs/README.md does not list {sorted(pages - listed)}"


def design_sections() -> set[str]:
    """What a `docs/design.md, "X"` citation may name: a heading there (its words before any `(`), or a row of its
    table of sections that moved to reference pages."""
    text = (DOCS / "design.md").read_text()
    names = {re.split(r" \(", h)[0].strip() for h in re.findall(r"^#+ (.*)$", prose(text), re.M)}
    moved = text[text.index("## Where the reference sections are"):]
    rows = re.findall(r"^\| ([^|]+?) \|", moved, re.M)[1:]  # the first row is the table's header
    names |= {re.sub(r" \(.*", "", row).strip() for row in rows}
    return {n.lower() for n in names}


def cited_sections() -> list[tuple[str, str]]:
    """Every (file, section) cited as `design.md, "Section"` in the code, tests, scenarios and pages."""
    out = []
    files = [p for folder in ("chaos", "tests", "scenarios", "examples", "benchmarks", "workloads", "docs")
             for p in (ROOT / folder).rglob("*") if p.suffix in {".py", ".md", ".yaml", ".yml", ".toml"}]
    files += [ROOT / "README.md", ROOT / "pyproject.toml", ROOT / ".ci" / "run"]
    for path in files:
        if path == Path(__file__):
            continue
        for raw in SECTION_CITE.findall(path.read_text(errors="replace")):
            name = re.sub(r"\s*(?:#\s*)?\n\s*(?:#\s*)?", " ", raw).strip()
            if not name.startswith("<"):  # a placeholder, as in design.md's own `"<section>"`
                out.append((rel(path), name))
    return out


def test_every_cited_design_section_exists() -> None:
    sections = design_sections()
    cites = cited_sections()
    assert len(cites) > 20  # the pattern still finds the citations the code makes
    missing = sorted({(f, s) for f, s in cites if s.lower() not in sections})
    assert not missing, f"design.md has no section (nor a row in its moved-sections table) named: {missing}"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_scenario_fields", DOCS / "gen_scenario_fields.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_scenario_field_reference_is_generated_from_the_current_schema() -> None:
    page = (DOCS / "scenario-fields.md").read_text()
    assert page == generator().render(), "docs/scenario-fields.md is out of date: python docs/gen_scenario_fields.py"


def test_the_scenario_field_reference_names_every_field_of_the_schema() -> None:
    """The generator walks the whole schema: every top-level section and every built-in fault kind has its place."""
    from chaos.registry import fault_plugins
    from chaos.scenario import Scenario

    page = (DOCS / "scenario-fields.md").read_text()
    for section in Scenario.model_json_schema()["properties"]:
        assert f"`{section}" in page, section
    for kind, cls in fault_plugins().items():
        if cls.__module__.startswith("chaos."):
            assert f"### `{kind}`" in page, kind
