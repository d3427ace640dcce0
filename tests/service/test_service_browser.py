"""The web page in headless Chromium against a real `sr serve`: upload, result size, budget map, errors.

Skips when Chromium, its driver or selenium is missing (CI installs Debian's chromium and
chromium-driver). Screenshots go to test-artifacts/ (git-ignored) for a person to look at.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PIL import Image
from skimage import data as skimage_data

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"

pytestmark = pytest.mark.browser


def _find(*names: str) -> str | None:
    return next((p for p in map(shutil.which, names) if p), None)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory):
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    chromium = _find("chromium", "chromium-browser", "google-chrome")
    driver_path = _find("chromedriver")
    if not chromium or not driver_path:
        pytest.skip("chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}", "--window-size=1100,1300"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver, condition, timeout: float = 90):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.2).until(condition)


def test_page_upscales_compares_and_reports_errors(browser, live_server: str, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    ARTIFACTS.mkdir(exist_ok=True)
    good = tmp_path / "astronaut.png"
    Image.fromarray(skimage_data.astronaut()[40:200:4, 120:360:4]).save(good)  # 60x40, a real photo
    bad = tmp_path / "notes.png"
    bad.write_bytes(b"these are notes, not pixels\n" * 8)

    browser.get(live_server + "/")
    _wait(browser, lambda d: len(Select(d.find_element(By.ID, "model")).options) > 0)
    _wait(browser, lambda d: "ready" in d.find_element(By.ID, "server-state").text)
    assert [o.text for o in Select(browser.find_element(By.ID, "scale")).options] == ["×2", "×3"]

    # Upload a real image at x3 and wait for the comparison view.
    browser.find_element(By.ID, "file").send_keys(str(good))
    Select(browser.find_element(By.ID, "scale")).select_by_value("3")
    browser.find_element(By.ID, "upscale").click()
    _wait(browser, lambda d: d.find_element(By.ID, "after").get_attribute("data-width"))
    after = browser.find_element(By.ID, "after")
    size = browser.execute_script("const i = arguments[0]; return [i.naturalWidth, i.naturalHeight];", after)
    assert size == [180, 120]
    assert browser.find_element(By.ID, "result").is_displayed()
    assert "180×120" in browser.find_element(By.ID, "info").text
    assert browser.find_element(By.ID, "download").get_attribute("download") == "astronaut_x3.png"
    # Before and after are drawn at the same size, whatever the slider says.
    boxes = browser.execute_script(
        "return ['before', 'after'].map(id => { const r = document.getElementById(id)"
        ".getBoundingClientRect(); return [Math.round(r.width), Math.round(r.height)]; });")
    assert boxes[0] == boxes[1] and boxes[0][0] > 200

    assert not browser.find_element(By.ID, "budget").is_displayed()  # overlay only when asked for
    browser.save_screenshot(str(ARTIFACTS / "service-page-compare.png"))

    # The budget-map overlay: a second request, same output size.
    browser.find_element(By.ID, "budget-toggle").click()
    _wait(browser, lambda d: d.execute_script(
        "const b = document.getElementById('budget'); return !b.hidden && b.complete && b.naturalWidth > 0;"))
    assert browser.execute_script("return document.getElementById('budget').naturalWidth") == 180
    assert "pale yellow = 8" in browser.find_element(By.ID, "status").text
    browser.save_screenshot(str(ARTIFACTS / "service-page-budget.png"))

    # A file that is not an image: the API's detail is shown to the person.
    browser.find_element(By.ID, "file").send_keys(str(bad))
    browser.find_element(By.ID, "upscale").click()
    _wait(browser, lambda d: d.find_element(By.ID, "error").is_displayed())
    message = browser.find_element(By.ID, "error").text
    assert "Error 415" in message and "not a supported image" in message
    assert not browser.find_element(By.ID, "result").is_displayed()  # no stale result beside the error
    browser.save_screenshot(str(ARTIFACTS / "service-page-error.png"))
