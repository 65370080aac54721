"""The manual's links and the code's citations of it resolve: every relative link in README.md and the markdown under
docs/ names a file of the repository (and, with a #fragment, one of its headings, slugged as GitHub does), and every
docs/....md citation in the code and the benchmark scripts names an existing file and heading. No JAX needed."""

import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CITATION = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.md)(#[\w-]+)?")
README_SECTION = re.compile(r"\(README\b|see the README|the README's")  # "(README: FID)", "the README's latent section"


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (letters, digits, '_', '-' and spaces kept),
    spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def prose(text: str) -> str:
    """The markdown without fenced code blocks and inline code (links there are not links)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(path: str) -> set:
    """The heading anchors of a markdown file (a repeated heading's later anchors get -1, -2, ...)."""
    seen, out = {}, set()
    with open(path) as f:
        text = re.sub(r"^```.*?^```", "", f.read(), flags=re.S | re.M)
    for line in text.splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            out.add(s if s not in seen else f"{s}-{seen[s]}")
            seen[s] = seen.get(s, 0) + 1
    return out


def manual_files():
    """README.md and every markdown file under docs/ (docs/benchmarks/ holds the results' pages)."""
    docs = os.path.join(ROOT, "docs")
    pages = [os.path.join(d, f) for d, _, fs in os.walk(docs) for f in fs if f.endswith(".md")]
    return [os.path.join(ROOT, "README.md")] + sorted(pages)


CODE = (".py", ".sh")  # the library, the tests and the benchmark scripts


def tracked_code_files():
    try:
        out = subprocess.run(["git", "ls-files", *(f"*{e}" for e in CODE)], cwd=ROOT, capture_output=True, text=True)
        files = out.stdout.split() if out.returncode == 0 else None
    except OSError:
        files = None
    if files is None:  # not a git checkout: every such file
        files = [
            os.path.relpath(os.path.join(d, f), ROOT)
            for d, _, fs in os.walk(ROOT)
            if "/." not in d
            for f in fs
            if f.endswith(CODE)
        ]
    return [f for f in files if os.path.exists(os.path.join(ROOT, f))]


def resolve(source: str, target: str):
    """None if the link `target` written in file `source` resolves, else what is wrong."""
    if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
        return None
    path, _, fragment = target.partition("#")
    full = os.path.normpath(os.path.join(os.path.dirname(source), path)) if path else source
    if not full.startswith(ROOT) or not os.path.exists(full):
        return f"no file {path}"
    if fragment and (not full.endswith(".md") or fragment not in anchors(full)):
        return f"no heading #{fragment} in {os.path.relpath(full, ROOT)}"
    return None


def test_the_manual_has_its_pages():
    pages = {os.path.relpath(p, os.path.join(ROOT, "docs")) for p in manual_files()}
    want = ["method", "config", "extending", "evaluation", "continuous_time", "latent", "scale", "benchmarks"]
    want += ["benchmarks/ceilings", "benchmarks/compile", "benchmarks/tests"]  # pages other files name
    assert {f"{p}.md" for p in want} <= pages


def test_the_benchmarks_index_links_every_results_page():
    """docs/benchmarks.md keeps the summary and an index: every page of docs/benchmarks/ is linked from it, and each
    page links back to it."""
    index = os.path.join(ROOT, "docs", "benchmarks.md")
    with open(index) as f:
        linked = {os.path.normpath(os.path.join(ROOT, "docs", t.partition("#")[0])) for t in LINK.findall(f.read())}
    folder = os.path.join(ROOT, "docs", "benchmarks")
    for name in sorted(os.listdir(folder)):
        page = os.path.join(folder, name)
        assert page in linked, f"docs/benchmarks.md does not link docs/benchmarks/{name}"
        with open(page) as f:
            assert "](../benchmarks.md)" in f.read(), f"docs/benchmarks/{name} does not link back to the index"


def test_a_broken_link_or_anchor_is_caught(tmp_path):
    assert resolve(os.path.join(ROOT, "README.md"), "docs/method.md#the-learned-sampler") is None
    assert "no heading" in resolve(os.path.join(ROOT, "README.md"), "docs/method.md#no-such-section")
    assert "no file" in resolve(os.path.join(ROOT, "README.md"), "docs/nothing.md")
    assert resolve(os.path.join(ROOT, "docs", "config.md"), "#run-identity") is None
    page = os.path.join(ROOT, "docs", "benchmarks", "rivals.md")  # a page one folder down: paths from its folder
    assert resolve(page, "../method.md#the-learned-sampler") is None
    assert "no file" in resolve(page, "method.md#the-learned-sampler")
    assert resolve(page, "../../benchmarks/results/loader.md") is None


def test_slugs_follow_github():
    assert slug("Quickstart") == "quickstart"
    assert slug("The bound in bits/dim") == "the-bound-in-bitsdim"
    assert slug("Which sampler wins (`benchmarks/samplers.py`)") == "which-sampler-wins-benchmarkssamplerspy"
    assert slug("Kingma & Gao 2023") == "kingma--gao-2023"
    assert slug("GPU, TPU pods") == "gpu-tpu-pods"


def test_every_relative_link_in_the_manual_resolves():
    bad, links = [], 0
    for source in manual_files():
        with open(source) as f:
            text = prose(f.read())
        for target in LINK.findall(text):
            links += 1
            problem = resolve(source, target)
            if problem:
                bad.append(f"{os.path.relpath(source, ROOT)}: ({target}) {problem}")
    assert not bad, "\n".join(bad)
    assert links > 50, links


def test_every_picture_and_link_of_a_rendered_table_resolves():
    """benchmarks/results/*.md are rendered by the benchmarks and copied in: each picture they show is committed
    beside them (a table rendered in OUT names OUT's policy.png, which must be copied under the table's name)."""
    results = os.path.join(ROOT, "benchmarks", "results")
    broken = []
    for name in sorted(f for f in os.listdir(results) if f.endswith(".md")):
        path = os.path.join(results, name)
        with open(path) as f:
            broken += [f"{name}: {t}: {why}" for t in LINK.findall(f.read()) if (why := resolve(path, t))]
    assert not broken, broken


def test_readme_fits_on_a_page_and_keeps_the_two_commands():
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    assert len(readme) <= 12_500, len(readme)
    assert "## Quickstart" in readme
    train = "pip install -r requirements.txt && python main.py --config=configs/default.py --workdir=workdirs/digits"
    tests = "pip install -r requirements.txt && python -m pytest -q -n 2 --dist loadfile tests"
    assert train in readme and tests in readme
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        assert "-m pytest -q -n 2 --dist loadfile tests" in f.read()  # CI runs the README's test command


def test_code_cites_the_manual_by_path_and_heading():
    """A citation of the manual in the code or a benchmark script is docs/FILE.md, or docs/method.md#heading
    (method.md is long: a citation names its section); each must resolve. A bare "method.md" is refused."""
    bad, cited = [], 0
    for rel in tracked_code_files():
        if rel == "tests/test_docs.py":
            continue
        with open(os.path.join(ROOT, rel)) as f:
            text = f.read()
        for m in CITATION.finditer(text):
            name, fragment = m.group(1), m.group(2) or ""
            if name.startswith("docs/") or (name == "README.md" and fragment):
                cited += 1
                if name == "docs/method.md" and not fragment:
                    bad.append(f"{rel}: {name} without a #heading")
                problem = resolve(os.path.join(ROOT, "README.md"), name + fragment)  # paths from the root
                if problem:
                    bad.append(f"{rel}: {name}{fragment}: {problem}")
            elif name == "method.md":
                bad.append(f"{rel}: {name}{fragment}: cite docs/method.md#heading")
        for m in README_SECTION.finditer(text):  # the README is a page now; its old sections live in docs/
            bad.append(f"{rel}: {m.group(0)!r}: cite docs/FILE.md#heading")
    assert not bad, "\n".join(bad)
    assert cited >= 18  # the docstrings that cite the method (and the rest of the manual) are found
