"""The built site in a real browser: Debian's Chromium driven by Playwright.

The site is served from 127.0.0.1 by a static server started here, the way ``make serve``
does. Every request that leaves 127.0.0.1 is aborted by the test, so the result is the
same with or without a network, and a page that needs a third-party server to work fails.
Screenshots of the index and of one tutorial land in ``browser/`` of the session's
temporary folder (pytest's, ``<basetemp>/browser``).

Chromium comes from Debian (``.ci/run`` installs it); Playwright's own browser download
(``playwright install``) is never used. axe-core, the accessibility checker injected into
every page, comes from npm at the version tests/package-lock.json pins (``make test``
runs ``npm ci --prefix tests`` when npm is there; ``.ci/run`` installs npm). Without
Chromium or axe-core these tests skip, saying which is missing, except where the suite
runs as on CI (``.ci/run`` sets ``TESTS_STRICT=1``, GitHub sets ``CI``): there they fail.
"""

import contextlib
import functools
import http.server
import re
import shutil
import threading
from concurrent.futures import Future
from urllib.parse import urljoin, urlsplit

import nbformat
import pytest
from conftest import ROOT, STRICT, page_of, strict, tutorial_sources
from playwright import sync_api

SOURCES = tutorial_sources()
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SITE_TITLE = "Learn torch.compile"
SEARCH_TERM = "foreach_map"
SCREENSHOT_TUTORIAL = "foreach_map"
# Sphinx renders math with MathJax from this CDN (its default mathjax_path): a reader
# offline sees the TeX source instead. Serving MathJax from _static would remove this.
ALLOWED_THIRD_PARTY = ("https://cdn.jsdelivr.net/npm/mathjax@",)
AXE = ROOT / "tests" / "node_modules" / "axe-core" / "axe.min.js"
# The axe-core impacts that fail the test ("minor" and "moderate" are reported only).
AXE_FAILING_IMPACTS = ("serious", "critical")


# --------------------------------------------------------------------------- fixtures


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the site and remembers every request it could not answer."""

    failures = None  # set per server: a list of (status, path)

    def log_message(self, *args):
        pass

    def send_error(self, code, message=None, explain=None):
        self.failures.append((code, self.path))
        super().send_error(code, message, explain)


@contextlib.contextmanager
def serving(site):
    """Serve the site from 127.0.0.1 on a free port; yield (base URL, failed requests)."""
    failures = []
    handler = type("Handler", (_QuietHandler,), {"failures": failures})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(site))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/", failures
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def site_server(built_site, axe_runs):
    """The built site, served; the accessibility checks start with it (axe_runs)."""
    with serving(built_site[0]) as server:
        yield server


def find_chromium():
    """Debian's chromium first (.ci/run installs it); GitHub's Ubuntu runners ship Chrome."""
    names = ("chromium", "chromium-browser", "google-chrome")
    return next(filter(None, map(shutil.which, names)), None)


@pytest.fixture(scope="module")
def browser():
    executable = find_chromium()
    if executable is None:
        missing("Debian's chromium is not installed (apt-get install chromium)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


class PageLog:
    """What went wrong while a page was open: console errors, uncaught exceptions,
    and requests to other hosts (which the test aborts)."""

    def __init__(self, base):
        self.base = base
        self.errors = []
        self.third_party = []

    def is_local(self, url):
        return url.startswith(self.base) or urlsplit(url).scheme in ("data", "blob")

    def route(self, route):
        url = route.request.url
        if self.is_local(url):
            route.continue_()
        else:
            self.third_party.append(url)
            route.abort()

    def console(self, message):
        if message.type != "error":
            return
        url = (message.location or {}).get("url", "")
        # A third-party resource the test aborted shows as "Failed to load resource" with
        # that resource's URL; it is recorded in self.third_party (and reported as such
        # unless allowed), not counted twice here. Any other console error, including a
        # failed load of the site's own files, is the site's.
        if message.text.startswith("Failed to load resource"):
            if not self.is_local(url) or urlsplit(url).path == "/favicon.ico":
                # /favicon.ico: Chromium guesses it on its own when a page names no icon.
                return
        self.errors.append(f"console.error: {message.text} ({url})")

    def page_error(self, error):
        self.errors.append(f"uncaught exception: {error}")


def new_context(browser, base, route):
    """A browser context for the site at ``base``: every request to another server goes
    to ``route``. Only those: routing the site's own requests through Python too made
    every page load about 10 % slower."""
    context = browser.new_context(
        viewport={"width": 1280, "height": 900}, accept_downloads=True
    )
    context.route(re.compile("^(?!" + re.escape(base) + ")"), route)
    context.set_default_timeout(15_000)
    return context


@pytest.fixture
def page(browser, site_server):
    base, _ = site_server
    log = PageLog(base)
    context = new_context(browser, base, log.route)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base[:-1])
    page = context.new_page()
    page.on("console", log.console)
    page.on("pageerror", log.page_error)
    page.log = log
    page.base = base
    yield page
    context.close()


def missing(path):
    """Why a tool the browser tests need is absent: a failure where the suite runs as on CI
    (conftest.strict: .ci/run installs the tools), a skip elsewhere."""
    if strict():
        pytest.fail(f"{path}; it must be installed here ({strict()} is set)")
    pytest.skip(path)


def open_page(page, path):
    """Go to a site path; return the HTTP response after the page and its assets load."""
    response = page.goto(urljoin(page.base, path), wait_until="load")
    assert response is not None, path
    return response


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory):
    """Where the screenshots go: the session's temporary folder, not the checkout."""
    return tmp_path_factory.mktemp("browser", numbered=False)


def screenshot(page, folder, name):
    page.screenshot(path=folder / name, full_page=True)


def source_title(source):
    """The tutorial's title: the first underlined heading of its docstring."""
    lines = (ROOT / source).read_text(encoding="utf-8").splitlines()
    for above, line in zip(lines, lines[1:]):
        if above.strip() and re.fullmatch(r"(=+|-+|~+|\^+|\*+)", line.strip()):
            if len(line.strip()) >= len(above.strip()) and not above.startswith(".."):
                return normalize(above)
    raise AssertionError(f"{source}: no title in the docstring")


def normalize(text):
    """Heading text as a reader sees it: no reST markup, no permalink sign, one space."""
    text = re.sub(r"[`*]", "", text).replace("#", "").replace("¶", "")
    return " ".join(text.split())


# --------------------------------------------------------------------------- tests


def test_index_has_a_card_per_tutorial(page, artifacts):
    assert open_page(page, "index.html").status == 200
    assert page.title().endswith(SITE_TITLE)
    cards = page.locator("div.sd-card")
    targets = []
    for i in range(cards.count()):
        card = cards.nth(i)
        assert card.is_visible(), f"card {i} is not visible"
        link = card.locator("a[href]").first
        targets.append(urljoin(page.url, link.get_attribute("href")).split("#")[0])
    screenshot(page, artifacts, "index.png")
    for source in SOURCES:
        assert urljoin(page.base, page_of(source)) in targets, f"no card for {source}"


def open_from_card(page, source):
    """Click the tutorial's card on the index, as a reader does; check where it leads."""
    open_page(page, "index.html")
    card = page.locator("div.sd-card").filter(
        has=page.locator(f'a[href$="{page_of(source)}"]')
    )
    assert card.count() == 1, f"{card.count()} cards link to {page_of(source)}"
    # A reader clicks anywhere on the card (sphinx-design stretches the link over it).
    with page.expect_navigation(wait_until="load") as navigation:
        card.click()
    assert navigation.value.status == 200
    assert page.url.split("#")[0] == urljoin(page.base, page_of(source))
    title = source_title(source)
    heading = normalize(page.locator("article h1").first.inner_text())
    assert heading == title
    assert page.title() == f"{title} — {SITE_TITLE}"


def check_copy_buttons(page):
    """Every code cell has one copy button; the first one copies its cell's code."""
    cells = page.locator("article div.highlight-Python")
    assert cells.count() > 0
    for i in range(cells.count()):
        assert cells.nth(i).locator("button.copybtn").count() == 1, f"code cell {i}"
    first = cells.first
    first.hover()
    first.locator("button.copybtn").click()
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied.strip() == first.locator("pre").inner_text().strip()


def check_images(page):
    """The page shows at least one image (every tutorial makes a chart: its card's
    thumbnail), and each one loads and has a size."""
    images = page.locator("article img")
    assert images.count() > 0, "no image on the page"
    for i in range(images.count()):
        image = images.nth(i)
        image.scroll_into_view_if_needed()
        src = image.get_attribute("src")
        page.wait_for_function("img => img.complete", arg=image.element_handle())
        natural = image.evaluate("img => [img.naturalWidth, img.naturalHeight]")
        assert min(natural) > 0, f"{src} did not load"
        box = image.bounding_box()
        assert box and box["width"] > 0 and box["height"] > 0, f"{src} has no size"


def check_downloads(page, source, folder):
    """The page's .py and .ipynb links download files that parse."""
    for kind, suffix in (("python", ".py"), ("jupyter", ".ipynb")):
        link = page.locator(f"div.sphx-glr-download-{kind} a[href]").first
        link.scroll_into_view_if_needed()
        with page.expect_download() as download_info:
            link.click()
        download = download_info.value
        assert download.suggested_filename == f"{source.stem}{suffix}"
        path = folder / download.suggested_filename
        download.save_as(path)
        text = path.read_text(encoding="utf-8")
        if suffix == ".py":
            compile(text, str(path), "exec")
        else:
            notebook = nbformat.reads(text, as_version=4)
            nbformat.validate(notebook)
            assert any(cell.cell_type == "code" for cell in notebook.cells)


@pytest.mark.parametrize("source", SOURCES, ids=str)
def test_tutorial_page_works(page, site_server, source, tmp_path, artifacts):
    """One visit per tutorial, from its card on the index: the page it opens has the
    tutorial's title, a working copy button on every code cell, images that load and
    downloads that return the files; and nothing failed or came from another server."""
    _, failures = site_server
    before = len(failures)
    open_from_card(page, source)
    page.wait_for_function(SETTLED)  # the page's scripts have added the copy buttons
    if source.stem == SCREENSHOT_TUTORIAL or (
        SCREENSHOT_TUTORIAL not in {s.stem for s in SOURCES} and source == SOURCES[0]
    ):
        screenshot(page, artifacts, f"{source.stem}.png")
    check_copy_buttons(page)
    check_images(page)
    check_downloads(page, source, tmp_path)
    problems = page_problems(page, failures, before)
    assert not problems, "\n".join(problems)


def test_index_thumbnails_load(page):
    open_page(page, "index.html")
    images = page.locator("img.sd-card-img-top")
    assert images.count() >= len(SOURCES)
    for i in range(images.count()):
        image = images.nth(i)
        image.scroll_into_view_if_needed()
        page.wait_for_function("img => img.complete", arg=image.element_handle())
        natural = image.evaluate("img => img.naturalWidth * img.naturalHeight")
        assert natural > 0, f"{image.get_attribute('src')} did not load"


def test_search_finds_foreach_map(page):
    open_page(page, "index.html")
    search = page.locator("form.bd-search input[name=q]:visible").first
    search.fill(SEARCH_TERM)
    with page.expect_navigation(wait_until="load"):
        search.press("Enter")
    assert "search.html" in page.url
    # Sphinx's search lists hits one by one, then retitles the block "Search Results".
    page.wait_for_function(
        "() => document.querySelector('#search-results h2')?.innerText"
        " === 'Search Results'"
    )
    results = page.locator("#search-results ul.search li a")
    hrefs = [
        urljoin(page.url, results.nth(i).get_attribute("href"))
        for i in range(results.count())
    ]
    page_url = urljoin(page.base, "recipes/foreach_map.html")
    assert any(h.split("#")[0].split("?")[0] == page_url for h in hrefs), hrefs
    hit = next(
        i for i, h in enumerate(hrefs) if h.split("#")[0].split("?")[0] == page_url
    )
    with page.expect_navigation(wait_until="load") as navigation:
        results.nth(hit).click()
    assert navigation.value.status == 200


# The pages that are not tutorials (test_tutorial_page_works visits those), then all.
SITE_PAGES = [
    "index.html",
    "recipes/index.html",
    "intermediate/index.html",
    "results.html",
    "search.html?q=torch.compile",
]
PAGES = SITE_PAGES + [page_of(s) for s in SOURCES]


# True once the scripts that run after "load" are done: a copy button on every code
# cell (sphinx-copybutton), and on the search page the finished results (Sphinx's search
# retitles its block "Search Results" when it has listed every hit).
SETTLED = """() => {
    const results = document.querySelector('#search-results');
    const searched = !results || results.querySelector('h2')?.innerText === 'Search Results';
    const cells = document.querySelectorAll('div.highlight').length;
    return searched && document.querySelectorAll('button.copybtn').length >= cells;
}"""


def page_problems(page, failures, before):
    """What went wrong while the page was open: script errors, requests to another
    server (beyond the allowed ones), and files the server did not have (of its
    ``failures``, those after the first ``before``)."""
    problems = list(page.log.errors)
    problems += [
        f"requested from another server: {url}"
        for url in sorted(set(page.log.third_party))
        if not url.startswith(ALLOWED_THIRD_PARTY)
    ]
    # /favicon.ico: Chromium asks for it on its own when a page names no icon.
    problems += [
        f"the server has no {request} ({code})"
        for code, request in failures[before:]
        if request != "/favicon.ico"
    ]
    return problems


@pytest.mark.parametrize("path", SITE_PAGES)
def test_no_console_errors_nor_third_party_requests(page, site_server, path):
    """No script error, no missing file, and nothing loaded from another server: the
    page works offline and tells no third party who read it."""
    _, failures = site_server
    before = len(failures)
    open_page(page, path)
    problems = []
    try:
        page.wait_for_function(SETTLED)
    except sync_api.TimeoutError:
        problems.append("the page's scripts did not finish (copy buttons, search)")
    problems += page_problems(page, failures, before)
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="module")
def axe_source():
    if not AXE.is_file():
        missing(f"{AXE.relative_to(ROOT)} is missing (npm ci --prefix tests)")
    return AXE.read_text(encoding="utf-8")


def axe_problems(browser, base, axe_source, path, mode):
    """The serious and critical axe-core violations of a page in a color mode."""
    context = new_context(browser, base, lambda route: route.abort())
    page = context.new_page()
    # The theme's default mode is "auto": it follows the reader's system setting.
    page.emulate_media(color_scheme=mode)
    page.goto(urljoin(base, path), wait_until="load")
    page.wait_for_function(SETTLED)
    assert page.evaluate("document.documentElement.dataset.theme") == mode
    page.add_script_tag(content=axe_source)
    result = page.evaluate(
        "async () => await axe.run(document, {resultTypes: ['violations']})"
    )
    context.close()
    problems = []
    for violation in result["violations"]:
        if violation["impact"] not in AXE_FAILING_IMPACTS:
            continue
        targets = [" ".join(map(str, n["target"])) for n in violation["nodes"][:5]]
        problems.append(
            f"{violation['impact']} {violation['id']}: {violation['help']} "
            f"({len(violation['nodes'])} elements, e.g. {'; '.join(targets)})\n"
            f"  first: {' '.join(violation['nodes'][0]['failureSummary'].split())}"
        )
    return problems


@pytest.fixture(scope="module")
def axe_runs(built_site):
    """{(page, mode): future of its problems}: every page checked by axe-core in both
    modes, in a thread with its own Chromium and its own server that starts with this
    module's first test of the built site, so that the checks run while the other browser
    tests do (they leave much of a 2-core CPU idle). Without axe-core or Chromium: nothing
    to run (the tests that need them skip or fail in their fixtures)."""
    executable = find_chromium()
    if not AXE.is_file() or executable is None:
        yield {}
        return
    axe_source = AXE.read_text(encoding="utf-8")
    futures = {(path, mode): Future() for path in PAGES for mode in ("light", "dark")}

    def check_all():
        with serving(built_site[0]) as (base, _), sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
            for (path, mode), future in futures.items():
                if not future.set_running_or_notify_cancel():
                    continue  # cancelled: the module ended early
                try:
                    problems = axe_problems(browser, base, axe_source, path, mode)
                    future.set_result(problems)
                except Exception as error:  # reported by that page's test
                    future.set_exception(error)
            browser.close()

    thread = threading.Thread(target=check_all, daemon=True)
    thread.start()
    yield futures
    for future in futures.values():
        future.cancel()
    thread.join()


@pytest.mark.parametrize("mode", ["light", "dark"])
@pytest.mark.parametrize("path", PAGES)
def test_no_serious_accessibility_violations(axe_runs, axe_source, browser, path, mode):
    """axe-core finds no serious or critical violation (WCAG 2.x A and AA, and axe's
    best practices) on the page, in the theme's light and dark modes."""
    # axe_source and browser: the test skips (or, on CI, fails) without them.
    problems = axe_runs[(path, mode)].result()
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------- the checks can fail


def test_a_missing_tool_fails_where_it_must_be_there(monkeypatch):
    """A skip on a reader's machine, a failure under .ci/run (and on GitHub)."""
    for name in STRICT:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(pytest.skip.Exception, match="chromium"):
        missing("chromium is not installed")
    monkeypatch.setenv("TESTS_STRICT", "1")
    with pytest.raises(pytest.fail.Exception, match="TESTS_STRICT is set"):
        missing("chromium is not installed")
    ci_run = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^export TESTS_STRICT=1$", ci_run, re.MULTILINE)


@pytest.mark.parametrize(
    "body, failure",
    [
        ("<p>A page without a chart.</p>", "no image on the page"),
        ('<img src="gone.png" alt="gone">', "gone.png did not load"),
    ],
)
def test_the_image_check_can_fail(browser, tmp_path, body, failure):
    (tmp_path / "page.html").write_text(
        f"<!DOCTYPE html><html><body><article>{body}</article></body></html>"
    )
    with serving(tmp_path) as (base, _):
        context = new_context(browser, base, lambda route: route.abort())
        page = context.new_page()
        page.base = base
        try:
            open_page(page, "page.html")
            with pytest.raises(AssertionError, match=failure):
                check_images(page)
        finally:
            context.close()
