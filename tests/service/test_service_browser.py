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


def _boxes(driver) -> list[list[int]]:
    return driver.execute_script(
        "return ['before', 'after'].map(id => { const r = document.getElementById(id)"
        ".getBoundingClientRect(); return [Math.round(r.width), Math.round(r.height)]; });")


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
    # Before and after are drawn at the same size, whatever the slider says; a 180-px result fits the
    # card, so it starts at 1:1 (not stretched and blurred); the toggle fits it to the card and back.
    boxes = _boxes(browser)
    assert boxes[0] == boxes[1] == [180, 120]
    pressed = lambda: [browser.find_element(By.ID, i).get_attribute("aria-pressed")  # noqa: E731
                       for i in ("view-fit", "view-toggle")]
    assert pressed() == ["false", "true"]  # the button in effect is marked
    browser.find_element(By.ID, "view-fit").click()
    boxes = _boxes(browser)
    assert boxes[0] == boxes[1] and boxes[0][0] > 600 and pressed() == ["true", "false"]
    # "before" (60x40 drawn at 180x120+) is enlarged smoothly unless pixel blocks are chosen.
    rendering = lambda: browser.find_element(By.ID, "before").value_of_css_property("image-rendering")  # noqa: E731
    assert rendering() == "auto"
    Select(browser.find_element(By.ID, "before-mode")).select_by_value("pixels")
    assert rendering() == "pixelated"
    Select(browser.find_element(By.ID, "before-mode")).select_by_value("smooth")
    browser.find_element(By.ID, "view-toggle").click()
    assert _boxes(browser)[1] == [180, 120] and pressed() == ["false", "true"] and rendering() == "auto"

    # The divider can be dragged on the image itself.
    from selenium.webdriver.common.action_chains import ActionChains

    compare = browser.find_element(By.ID, "compare")
    ActionChains(browser).move_to_element_with_offset(compare, -45, 0).click_and_hold() \
        .move_to_element_with_offset(compare, 45, 0).release().perform()  # from 25% to 75%
    assert abs(float(browser.find_element(By.ID, "slider").get_attribute("value")) - 75) < 3
    # The loupe: 4x the image pixels under the pointer, from the side of the divider it is on.
    browser.find_element(By.ID, "loupe-toggle").click()
    ActionChains(browser).move_to_element_with_offset(compare, 60, 10).perform()  # right of the divider
    loupe = browser.find_element(By.ID, "loupe")
    _wait(browser, lambda d: loupe.is_displayed(), 10)
    assert loupe.value_of_css_property("background-size") == "720px 480px"
    assert loupe.get_attribute("data-side") == "after"
    ActionChains(browser).move_to_element_with_offset(compare, -60, 10).perform()
    assert loupe.get_attribute("data-side") == "before"
    browser.save_screenshot(str(ARTIFACTS / "service-page-loupe.png"))
    browser.find_element(By.ID, "loupe-toggle").click()

    assert not browser.find_element(By.ID, "budget").is_displayed()  # overlay only when asked for
    browser.save_screenshot(str(ARTIFACTS / "service-page-compare.png"))

    # The budget-map overlay: the map the server kept with the result, no second upscale.
    requests = ("return performance.getEntriesByType('resource').map(e => new URL(e.name).pathname)"
                ".filter(p => p.startsWith('/v1/upscale') || p.startsWith('/v1/budget-maps/'))")
    before_toggle = browser.execute_script(requests)
    browser.find_element(By.ID, "budget-toggle").click()
    _wait(browser, lambda d: d.execute_script(
        "const b = document.getElementById('budget'); return !b.hidden && b.complete && b.naturalWidth > 0;"))
    assert browser.execute_script("return document.getElementById('budget').naturalWidth") == 180
    new = browser.execute_script(requests)[len(before_toggle):]
    assert len(new) == 1 and new[0].startswith("/v1/budget-maps/"), new
    # The legend: a small colour bar beside the image, 0 at the bottom and k_max (8) at the top.
    legend = browser.find_element(By.ID, "legend")
    assert legend.is_displayed()
    assert browser.find_element(By.ID, "legend-max").text == "8"
    assert browser.find_element(By.CLASS_NAME, "legend-min").text == "0"
    box, bar, top, bottom = browser.execute_script(
        "return ['viewport', 'legend'].map(id => document.getElementById(id).getBoundingClientRect())"
        ".concat(['legend-max', 'legend-min'].map(c => document.querySelector('.' + c) || "
        "document.getElementById(c)).map(e => e.getBoundingClientRect()));")
    assert bar["left"] >= box["right"] - 1 and bar["top"] < box["bottom"] and bar["width"] < 100
    assert top["top"] < bottom["top"]
    status = browser.find_element(By.ID, "status").text
    assert len(status) < 40, status  # no long legend in the status line
    assert browser.find_element(By.ID, "progress").size["width"] > 300  # not squeezed by it
    browser.save_screenshot(str(ARTIFACTS / "service-page-budget.png"))

    # A file that is not an image: the browser cannot show it, so the page asks the server's preview,
    # whose refusal is shown, and Upscale stays off (the same upload would be refused again).
    browser.find_element(By.ID, "file").send_keys(str(bad))
    _wait(browser, lambda d: d.find_element(By.ID, "error").is_displayed())
    message = browser.find_element(By.ID, "error").text
    assert "Error 415" in message and "not a supported image" in message
    assert not browser.find_element(By.ID, "upscale").is_enabled()
    assert "cannot read this file" in browser.find_element(By.ID, "hint").text
    assert not browser.find_element(By.ID, "result").is_displayed()  # no stale result beside the error
    browser.save_screenshot(str(ARTIFACTS / "service-page-error.png"))
    browser.find_element(By.ID, "file").send_keys(str(good))  # another file: Upscale is back
    _wait(browser, lambda d: d.find_element(By.ID, "upscale").is_enabled(), 10)


def _photo(tmp_path: Path, name: str, **save: object) -> Path:
    path = tmp_path / name
    Image.fromarray(skimage_data.astronaut()[40:200:4, 120:360:4]).save(path, **save)  # 60x40
    return path


def test_tiff_input_shows_the_servers_decoding_as_before(browser, live_server: str, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    ARTIFACTS.mkdir(exist_ok=True)
    browser.get(live_server + "/")
    _wait(browser, lambda d: not d.find_element(By.ID, "upscale").get_attribute("disabled") or
          d.find_element(By.ID, "model").get_attribute("value"))
    browser.find_element(By.ID, "file").send_keys(str(_photo(tmp_path, "shot.tif", format="TIFF")))
    _wait(browser, lambda d: "decoded by the server" in d.find_element(By.ID, "file-info").text, 30)
    assert "60×40" in browser.find_element(By.ID, "file-info").text
    browser.find_element(By.ID, "upscale").click()
    _wait(browser, lambda d: d.find_element(By.ID, "result").is_displayed())
    before = browser.find_element(By.ID, "before")
    natural = "return arguments[0].complete ? [arguments[0].naturalWidth, arguments[0].naturalHeight] : null"
    _wait(browser, lambda d: d.execute_script(natural, before))
    assert browser.execute_script(natural, before) == [60, 40]  # a real picture, not a broken image
    note = browser.find_element(By.ID, "before-note")
    assert note.is_displayed() and "server's decoding" in note.text
    # The before side really differs from the result: sample both at the same spot through a canvas.
    differ = browser.execute_script("""
        const px = (img) => { const c = document.createElement('canvas'); c.width = 120; c.height = 80;
          const g = c.getContext('2d'); g.drawImage(img, 0, 0, 120, 80);
          return g.getImageData(0, 0, 120, 80).data; };
        const a = px(document.getElementById('before')), b = px(document.getElementById('after'));
        let d = 0; for (let i = 0; i < a.length; i++) d += Math.abs(a[i] - b[i]); return d / a.length;""")
    assert 0 < differ < 60  # similar pictures (the same shot), not the same image
    browser.save_screenshot(str(ARTIFACTS / "service-page-tiff.png"))


def test_quality_box_follows_the_real_output_format(browser, live_server: str, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(live_server + "/")
    quality = browser.find_element(By.ID, "quality")
    browser.find_element(By.ID, "file").send_keys(str(_photo(tmp_path, "shot.jpg", format="JPEG")))
    fmt = Select(browser.find_element(By.ID, "format"))
    assert fmt.first_selected_option.get_attribute("value") == "same"
    assert quality.is_enabled()  # JPEG in, JPEG out: the quality applies
    browser.find_element(By.ID, "file").send_keys(str(_photo(tmp_path, "shot.png")))
    assert not quality.is_enabled()
    fmt.select_by_value("webp")
    assert quality.is_enabled()
    icon = "return fetch('/favicon.ico').then(r => [r.status, r.headers.get('content-type')])"
    assert browser.execute_script(icon) == [200, "image/png"]


def test_api_key_flow_says_what_is_needed_and_applies_the_key_as_typed(browser, make_server,
                                                                         tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    ARTIFACTS.mkdir(exist_ok=True)
    base = make_server(api_key="s3cret-key")
    browser.get(base + "/")
    hint = browser.find_element(By.ID, "hint")
    _wait(browser, lambda d: "needs an API key" in hint.text, 30)
    assert browser.find_element(By.ID, "key-box").get_attribute("open") is not None
    assert not browser.find_element(By.ID, "upscale").is_enabled()
    browser.find_element(By.ID, "file").send_keys(str(_photo(tmp_path, "shot.png")))
    assert "needs an API key" in hint.text  # choosing a file does not hide why nothing works
    key = browser.find_element(By.ID, "api-key")
    fits = browser.execute_script("""
        const i = arguments[0], s = getComputedStyle(i);
        const g = document.createElement('canvas').getContext('2d');
        g.font = s.font; const room = i.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
        return g.measureText(i.placeholder).width <= room;""", key)
    assert fits, "the key's placeholder is cut off"
    key.send_keys("wrong")
    _wait(browser, lambda d: "API key is wrong" in hint.text, 30)
    browser.save_screenshot(str(ARTIFACTS / "service-page-key-needed.png"))
    key.clear()
    key.send_keys("s3cret-key")  # no blur, no Enter: applied as typed
    _wait(browser, lambda d: len(Select(d.find_element(By.ID, "model")).options) > 0, 30)
    _wait(browser, lambda d: d.find_element(By.ID, "upscale").is_enabled(), 10)
    assert hint.text == ""
    browser.find_element(By.ID, "upscale").click()
    _wait(browser, lambda d: d.find_element(By.ID, "result").is_displayed())
    assert browser.find_element(By.ID, "after").get_attribute("data-width") == "120"
    browser.save_screenshot(str(ARTIFACTS / "service-page-key-ok.png"))


def test_drop_wording_only_where_files_can_be_dropped(browser, live_server: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(live_server + "/")
    assert browser.find_element(By.CLASS_NAME, "drop-hint").is_displayed()  # a desktop pointer
    browser.execute_cdp_cmd("Emulation.setTouchEmulationEnabled", {"enabled": True, "maxTouchPoints": 5})
    try:
        browser.get(live_server + "/")
        assert not browser.find_element(By.CLASS_NAME, "drop-hint").is_displayed()  # a touch screen
        assert "Choose an image" in browser.find_element(By.ID, "drop-text").text
        browser.save_screenshot(str(ARTIFACTS / "service-page-touch.png"))
    finally:
        browser.execute_cdp_cmd("Emulation.setTouchEmulationEnabled", {"enabled": False})


def test_denoise_and_look_sliders_only_for_photo_and_auto_and_sent_with_the_upload(
        browser, make_server, natural_weights: Path, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    ARTIFACTS.mkdir(exist_ok=True)
    base = make_server(weights_dir=natural_weights, model="asa-base")
    browser.get(base + "/")
    _wait(browser, lambda d: len(Select(d.find_element(By.ID, "model")).options) > 0, 30)
    model = Select(browser.find_element(By.ID, "model"))
    assert [o.get_attribute("value") for o in model.options] == ["asa-base", "photo", "photo-natural", "auto"]
    assert model.first_selected_option.get_attribute("value") == "asa-base"  # the server's default
    row, denoise = browser.find_element(By.ID, "denoise-row"), browser.find_element(By.ID, "denoise")
    look_row, look = browser.find_element(By.ID, "look-row"), browser.find_element(By.ID, "look")
    assert not row.is_displayed() and not denoise.is_enabled()
    assert not look_row.is_displayed() and not look.is_enabled()
    assert [look.get_attribute(a) for a in ("min", "max", "step", "value")] == ["0", "1", "0.05", "0"]
    for name in ("photo", "auto"):
        model.select_by_value(name)
        assert row.is_displayed() and denoise.is_enabled(), name
        assert look_row.is_displayed() and look.is_enabled(), name
        assert browser.find_element(By.ID, "denoise-value").text == "1.00"
        assert browser.find_element(By.ID, "look-value").text == "0.00"
        assert look_row.text.lower().startswith("natural texture"), look_row.text
    model.select_by_value("photo-natural")  # photo-natural is weights of its own: no sliders
    assert not row.is_displayed() and not look_row.is_displayed()
    # Keyboard on the real slider: 1 -> 0.5 in ten 0.05 steps, the label follows.
    model.select_by_value("photo")
    denoise.send_keys(*[Keys.ARROW_LEFT] * 10)
    assert denoise.get_attribute("value") == "0.5"
    assert browser.find_element(By.ID, "denoise-value").text == "0.50"
    look.send_keys(*[Keys.ARROW_RIGHT] * 5)  # 0 -> 0.25
    assert look.get_attribute("value") == "0.25"
    assert browser.find_element(By.ID, "look-value").text == "0.25"
    # Record the form fields of each upload the page sends (all but the file itself).
    browser.execute_script("""
        window.sentFields = []; const send = XMLHttpRequest.prototype.send;
        XMLHttpRequest.prototype.send = function (body) {
          if (body instanceof FormData)
            window.sentFields.push(Object.fromEntries([...body].filter(([k]) => k !== 'file')));
          return send.call(this, body); };""")
    browser.find_element(By.ID, "file").send_keys(str(_photo(tmp_path, "shot.png")))

    # Back to asa-base: the sliders hide and their values are not sent (the API would refuse them with a 422).
    model.select_by_value("asa-base")
    assert not row.is_displayed() and not denoise.is_enabled() and not look.is_enabled()
    upload = browser.find_element(By.ID, "upscale")
    upload.click()
    _wait(browser, lambda d: upload.is_enabled(), 30)  # done, or failed
    assert not browser.find_element(By.ID, "error").is_displayed(), browser.find_element(By.ID, "error").text
    assert "asa-base-x2" in browser.find_element(By.ID, "info").text

    # photo with the sliders still at 0.5 and 0.25: sent, and the server ran photo at them.
    model.select_by_value("photo")
    assert row.is_displayed() and denoise.get_attribute("value") == "0.5"
    assert look_row.is_displayed() and look.get_attribute("value") == "0.25"
    upload.click()
    _wait(browser, lambda d: upload.is_enabled(), 30)
    assert not browser.find_element(By.ID, "error").is_displayed(), browser.find_element(By.ID, "error").text
    info = browser.find_element(By.ID, "info").text
    assert "120×80" in info and "photo-x2@denoise=0.5,look=0.25" in info, info
    sent = browser.execute_script("return window.sentFields")
    assert [(f["model"], f.get("denoise"), f.get("look")) for f in sent] == [
        ("asa-base", None, None), ("photo", "0.5", "0.25")]
    browser.save_screenshot(str(ARTIFACTS / "service-page-photo.png"))


def test_docs_render_every_operation_offline(browser, live_server: str) -> None:
    """Swagger UI must read FastAPI's OpenAPI 3.1 document (4.x showed "Unable to render this
    definition" and no operations), from this server's files alone."""
    import httpx
    from selenium.webdriver.common.by import By

    spec = httpx.get(f"{live_server}/openapi.json", timeout=10).json()
    assert spec["openapi"].startswith("3.1")
    operations = sorted(f"{method.upper()} {path}" for path, ops in spec["paths"].items() for method in ops)
    ARTIFACTS.mkdir(exist_ok=True)
    browser.get(live_server + "/docs")
    _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".opblock")) >= len(operations), 60)
    shown = sorted(
        f"{b.find_element(By.CSS_SELECTOR, '.opblock-summary-method').text} "
        f"{b.find_element(By.CSS_SELECTOR, '.opblock-summary-path').get_attribute('data-path')}"
        for b in browser.find_elements(By.CSS_SELECTOR, ".opblock"))
    assert shown == operations and len(operations) >= 5, shown
    assert "Unable to render" not in browser.find_element(By.TAG_NAME, "body").text
    hosts = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => new URL(e.name).host)")
    assert set(hosts) <= {live_server.removeprefix("http://")}, hosts  # nothing from a CDN
    browser.save_screenshot(str(ARTIFACTS / "service-docs.png"))
