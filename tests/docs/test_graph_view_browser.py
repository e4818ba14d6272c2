"""The graph view in a real browser: headless Chromium opens the tutorial's
graph cells, executed by Jupyter and exported to HTML by nbconvert (the path a
notebook's HTML output takes), and a ~160-node layer-norm MLP backward graph.

Checked from the rendered page: no two boxes overlap, each drawing is at most
3:1 either way, clicking a tasklet shows its expression (taken from the graph
in Python, not from the page), a group opens.  Screenshots go to
``.ci/artifacts/`` (``SYMDIFF_ARTIFACTS`` overrides) for a person to look at.

Needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them),
selenium and nbconvert; skips with a message where they are missing."""

import functools
import os
import shutil
import sys
from itertools import combinations
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.ipynb"
ARTIFACTS = Path(os.environ.get("SYMDIFF_ARTIFACTS", ROOT / ".ci" / "artifacts"))
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
DRIVER = shutil.which("chromedriver")
GRAPH_CELLS = ("heat.graph", "heat.view(")   # the tutorial cells that show graphs

if not (CHROMIUM and DRIVER):
    pytest.skip("no chromium + chromedriver on PATH (Debian: apt-get install chromium chromium-driver)",
                allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
nbconvert = pytest.importorskip("nbconvert", reason="nbconvert is not installed (pip install -e '.[test]')")
pytest.importorskip("ipykernel")
from ipykernel.kernelspec import get_kernel_dict  # noqa: E402
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager  # noqa: E402
from jupyter_client.manager import KernelManager  # noqa: E402

import numpy as np  # noqa: E402

import symdiff as sd  # noqa: E402

# Boxes and drawings of the visible drawing of every view on the page, in CSS pixels.
MEASURE = """
return Array.from(document.querySelectorAll('.symdiff-view')).map(function (root) {
  var svg = Array.from(root.querySelectorAll('svg.sdv-scene')).find(function (s) {
    return s.style.display !== 'none'; });
  var r = svg.getBoundingClientRect();
  return {id: root.id, scene: svg.getAttribute('data-scene'), width: r.width, height: r.height,
          boxes: Array.from(svg.querySelectorAll('g.node, g.group')).map(function (g) {
            var b = g.getBoundingClientRect();
            return [g.getAttribute('data-id'), b.left, b.top, b.width, b.height]; })};
});
"""


class _ThisInterpreter(KernelSpecManager):
    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return KernelSpec(resource_dir="", **get_kernel_dict())


def tutorial_graph_notebook():
    """The tutorial up to its graph cells (the cells that define the program and
    show graphs, with the markdown around them), as a notebook to execute."""
    nb = nbformat.read(TUTORIAL, as_version=4)
    keep = []
    for cell in nb.cells:
        src = cell.source.strip()
        graph = cell.cell_type == "code" and src.startswith(GRAPH_CELLS)
        defines = cell.cell_type == "code" and ("import symdiff" in src or "@sd.differentiable_program" in src)
        if cell.cell_type == "markdown" or graph or defines:
            keep.append(cell)
    nb.cells = keep
    assert sum(c.cell_type == "code" and c.source.strip().startswith(GRAPH_CELLS) for c in nb.cells) == 2
    return nb


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1000,1000",
                "--hide-scrollbars", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=webdriver.ChromeService(DRIVER), options=options)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def tutorial_html(tmp_path_factory) -> Path:
    nb = tutorial_graph_notebook()
    km = KernelManager(kernel_name="python3", kernel_spec_manager=_ThisInterpreter())
    tmp = tmp_path_factory.mktemp("tutorial")
    nbclient.NotebookClient(nb, km=km, timeout=120, allow_errors=False,
                            resources={"metadata": {"path": str(tmp)}}).execute()
    body, _ = nbconvert.HTMLExporter().from_notebook_node(nb)
    page = tmp / "tutorial_graphs.html"
    page.write_text(body, encoding="utf-8")
    return page


@functools.lru_cache(maxsize=None)
def heat_program():
    """The tutorial's program, run from the notebook's own cells."""
    nb = tutorial_graph_notebook()
    scope: dict = {}
    for cell in nb.cells:
        if cell.cell_type == "code" and not cell.source.strip().startswith(GRAPH_CELLS):
            exec(compile(cell.source, str(TUTORIAL), "exec", dont_inherit=True), scope)
    return scope["heat"]


def check_layout(views: list[dict]) -> None:
    for view in views:
        assert view["boxes"], view["id"]
        aspect = view["width"] / view["height"]
        assert 1 / 3 <= aspect <= 3, (view["id"], view["scene"], view["width"], view["height"])
        for a, b in combinations(view["boxes"], 2):
            (na, xa, ya, wa, ha), (nb_, xb, yb, wb, hb) = a, b
            apart = xa + wa <= xb + 0.5 or xb + wb <= xa + 0.5 or ya + ha <= yb + 0.5 or yb + hb <= ya + 0.5
            assert apart, f"{view['id']} ({view['scene']}): {na} overlaps {nb_}"


def screenshot(driver, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1000, min(max(height + 200, 600), 6000))   # the window, not the page: room for its frame
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}", file=sys.stderr)
    return path


def click_and_read(driver, root_id: str, node_id: str) -> str:
    from selenium.webdriver.common.by import By
    box = driver.find_element(By.CSS_SELECTOR, f'#{root_id} svg.sdv-scene:not([style*="display: none"]) '
                                               f'g[data-id="{node_id}"]')
    box.click()
    return driver.find_element(By.CSS_SELECTOR, f"#{root_id} .sdv-details").text


def test_tutorial_graphs_in_chromium(browser, tutorial_html):
    browser.get(tutorial_html.as_uri())
    views = browser.execute_script(MEASURE)
    assert len(views) == 2, "the tutorial's two graph cells did not display the interactive view"
    check_layout(views)
    heat = heat_program()
    forward = heat.graph
    tasklet = next(t for t in forward.tasklets() if "*" in str(next(iter(t.body.values()))))
    conn, expr = next(iter(tasklet.body.items()))
    text = click_and_read(browser, views[0]["id"], tasklet.name)
    line = tasklet.source.rpartition(":")[2]        # the kernel names the cell's file differently
    assert f"{conn} = {expr}" in text and f".py:{line}" in text
    screenshot(browser, "graph_view_tutorial.png")


def layer_norm_mlp():
    def ln(x, g, b):
        mu = np.mean(x, axis=-1, keepdims=True)
        var = np.mean((x - mu) ** 2, axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * g + b

    @sd.differentiable_program
    def mlp(x: sd.f32[32, 16], w1: sd.f32[16, 32], b1: sd.f32[32], g1: sd.f32[32], c1: sd.f32[32],
            w2: sd.f32[32, 32], b2: sd.f32[32], g2: sd.f32[32], c2: sd.f32[32], w3: sd.f32[32, 4],
            y: sd.f32[32, 4]):
        h = np.maximum(ln(x @ w1 + b1, g1, c1), 0.0)
        h = np.tanh(ln(h @ w2 + b2, g2, c2))
        s = h @ w3
        lse = np.log(np.sum(np.exp(s), axis=1, keepdims=True))
        return -np.mean(np.sum(y * (s - lse), axis=1))

    return mlp


def test_mlp_backward_graph_grouped_and_whole_in_chromium(browser, tmp_path):
    from selenium.webdriver.common.by import By
    graph = layer_norm_mlp().backward_graph()
    assert graph.nx.number_of_nodes() >= 150
    page = tmp_path / "mlp.html"
    graph.view().save(str(page))
    browser.set_window_size(1000, 1000)
    browser.get(page.as_uri())
    (grouped,) = browser.execute_script(MEASURE)
    assert grouped["scene"] == "line" and len(grouped["boxes"]) < graph.nx.number_of_nodes() / 2
    check_layout([grouped])
    screenshot(browser, "graph_view_mlp_grouped.png")
    root = grouped["id"]
    group = next(b[0] for b in grouped["boxes"] if b[0].startswith("G"))
    assert "tasklets" in click_and_read(browser, root, group)
    browser.find_element(By.CSS_SELECTOR, f"#{root} .sdv-details button").click()   # open group
    (inside,) = browser.execute_script(MEASURE)
    assert inside["scene"] == f"line:{group}"
    check_layout([inside])
    browser.find_element(By.CSS_SELECTOR, f'#{root} button[data-show="all"]').click()
    (whole,) = browser.execute_script(MEASURE)
    assert whole["scene"] == "all" and len(whole["boxes"]) == graph.nx.number_of_nodes()
    check_layout([whole])
    tasklet = next(t for t in graph.tasklets() if t.backward)
    conn, expr = next(iter(tasklet.body.items()))
    assert f"{conn} = {expr}" in click_and_read(browser, root, tasklet.name)
    screenshot(browser, "graph_view_mlp_all.png")


# What JupyterLab does with an HTML output: innerHTML on a detached node, each
# script replaced by a fresh copy (which runs once the node is attached).
JUPYTERLAB_INSERT = """
var host = document.createElement('div');
host.innerHTML = arguments[0];
host.querySelectorAll('script').forEach(function (s) {
  var c = document.createElement('script');
  Array.from(s.attributes).forEach(function (a) { c.setAttribute(a.name, a.value); });
  c.textContent = s.textContent;
  s.parentNode.replaceChild(c, s);
});
document.body.appendChild(host);
"""


def test_view_inserted_the_way_jupyterlab_does(browser, tmp_path):
    forward = heat_program().graph
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    browser.set_window_size(1000, 1000)
    browser.get(blank.as_uri())
    browser.execute_script(JUPYTERLAB_INSERT, forward.view().to_html())
    (view,) = browser.execute_script(MEASURE)
    check_layout([view])
    tasklet = forward.tasklets()[-1]
    conn, expr = next(iter(tasklet.body.items()))
    assert f"{conn} = {expr}" in click_and_read(browser, view["id"], tasklet.name)


def test_loop_box_opens_to_its_body(browser, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    @sd.differentiable_program
    def looped(x: sd.f32[16], w: sd.f32[16]):
        s = np.tanh(x * w)
        s = sd.fori_loop(0, 10, lambda i, u: u * 0.5 + np.sin(u), s)
        return np.sum(s * s)

    page = tmp_path / "loop.html"
    looped.backward_graph().view().save(str(page))
    browser.set_window_size(1000, 1000)
    browser.get(page.as_uri())
    (whole,) = browser.execute_script(MEASURE)
    check_layout([whole])
    box = next(b[0] for b in whole["boxes"] if b[0].endswith("(loop)"))
    assert "fori_loop" in click_and_read(browser, whole["id"], box)
    ActionChains(browser).double_click(browser.find_element(
        By.CSS_SELECTOR, f'#{whole["id"]} svg.sdv-scene[data-scene="all"] g[data-id="{box}"]')).perform()
    (inside,) = browser.execute_script(MEASURE)
    assert inside["scene"] == f"loop:{box}" and len(inside["boxes"]) >= 3
    check_layout([inside])


WHEEL = """
var svg = document.querySelector('svg.sdv-scene:not([style*="display: none"])'), r = svg.getBoundingClientRect();
svg.dispatchEvent(new WheelEvent('wheel', {deltaY: -100, ctrlKey: arguments[0], clientX: r.left + 50,
                                           clientY: r.top + 50, bubbles: true, cancelable: true}));
return svg.querySelector('g.sd-world').getAttribute('transform');
"""


def test_ctrl_wheel_zooms_and_a_plain_wheel_leaves_the_drawing(browser, tmp_path):
    page = tmp_path / "heat.html"
    heat_program().graph.view().save(str(page))
    browser.get(page.as_uri())
    before = browser.execute_script(WHEEL, False)   # the page scrolls instead
    assert before == "translate(0 0) scale(1)"
    zoomed = browser.execute_script(WHEEL, True)
    assert zoomed != before and float(zoomed.rsplit("scale(", 1)[1].rstrip(")")) > 1
