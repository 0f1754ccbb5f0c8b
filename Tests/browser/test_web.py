"""The web app in a real browser (Chromium through Selenium), against the real `nimbus serve`.

Run by scripts/test (needs Debian's chromium + chromium-driver and ffmpeg, PyPI's selenium and axe-selenium-python;
.ci/run installs them). The tests run in order on one server and one browser, as one user's afternoon. Screenshots
of each screen go to artifacts/screenshots/; with NIMBUS_UPDATE_DOCS=1 they also replace docs/web-*.png.
"""
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import zipfile

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC

from chromium import make_driver, wait

ROOT = pathlib.Path(__file__).resolve().parents[2]
BINARY = os.environ.get("NIMBUS_BINARY", str(ROOT / ".build/debug/nimbus"))
ARTIFACTS = ROOT / "artifacts/screenshots"
CHUNK = 256 * 1024


def call(base, method, path, body=None, token=None, raw=None, headers=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(base + path, data=data, method=method)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", "Bearer " + token)
    for key, value in (headers or {}).items():
        request.add_header(key, value)
    with urllib.request.urlopen(request) as response:
        payload = response.read()
        return response.status, dict(response.headers), payload


def listing(server, parent="root"):
    _, _, body = call(server["base"], "GET", f"/v1/files?parentId={parent}&limit=1000", token=server["token"])
    return json.loads(body)["files"]


@pytest.fixture(scope="module")
def server():
    data = tempfile.mkdtemp(prefix="nimbus-web-")
    process = subprocess.Popen(
        [BINARY, "serve", "--data", data + "/server", "--port", "0", "--allow-registration", "--chunk-size", "256KiB", "--log-level", "error",
         # A low mass-deletion breaker, so test_mass_deletion_paused_then_confirmed can trip it with a few dozen items.
         "--mass-deletion-minimum", "20"],
        stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    base = "http://127.0.0.1:" + line.rsplit(":", 1)[1].strip()
    call(base, "POST", "/v1/auth/register", {"username": "webby", "password": "correct horse"})
    _, _, body = call(base, "POST", "/v1/auth/login", {"username": "webby", "password": "correct horse", "deviceName": "test"})
    downloads = pathlib.Path(data) / "downloads"
    downloads.mkdir()
    yield {"base": base, "token": json.loads(body)["accessToken"], "work": pathlib.Path(data), "downloads": downloads}
    process.terminate()
    process.wait(timeout=30)
    shutil.rmtree(data, ignore_errors=True)


@pytest.fixture(scope="module")
def browser(server):
    driver = make_driver()
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(server["downloads"])})
    yield driver
    driver.quit()


def screenshot(driver, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    if os.environ.get("NIMBUS_UPDATE_DOCS"):
        shutil.copy(path, ROOT / "docs" / f"web-{name}.png")


def row(driver, name, host="files-list"):
    """A row of a file list (`host`), or of a table (`host` ending in -rows)."""
    selector = f'#{host} tr[data-name="{name}"]' if host.endswith("-rows") else f'#{host} [role=row][data-name="{name}"]'
    return wait(driver, EC.presence_of_element_located((By.CSS_SELECTOR, selector)))


def gone(driver, name, host="files-list"):
    wait(driver, lambda d: not d.find_elements(By.CSS_SELECTOR, f'#{host} [data-name="{name}"]'))


def names(driver, host="files-list"):
    """The names of the rows in the page, in list order (read in one step: the list re-renders as it likes)."""
    return driver.execute_script(
        "return [...document.querySelectorAll(`#${arguments[0]} [role=row][data-name]`)]"
        ".sort((a, b) => a.dataset.index - b.dataset.index).map((r) => r.dataset.name)", host)


def retrying(action, timeout=20):
    """Runs `action` again when the list re-rendered under it (live updates)."""
    deadline = time.time() + timeout
    while True:
        try:
            return action()
        except StaleElementReferenceException:
            if time.time() > deadline:
                raise
            time.sleep(0.05)


def row_text(driver, name, host="files-list"):
    return retrying(lambda: row(driver, name, host).text)


def menu(driver, name, label, host="files-list"):
    """Picks `label` in a row's ⋯ menu."""
    retrying(lambda: row(driver, name, host).find_element(By.CSS_SELECTOR, "button.more").click())
    wait(driver, EC.element_to_be_clickable((By.XPATH, f"//div[@role='menu']/button[text()='{label}']"))).click()


def click_in_row(driver, name, label, host):
    retrying(lambda: row(driver, name, host).find_element(By.XPATH, f".//button[text()='{label}']").click())


def place(driver, name):
    driver.find_element(By.CSS_SELECTOR, f'#nav a[data-place="{name}"]').click()
    wait(driver, EC.visibility_of_element_located((By.ID, f"{name}-view")))


def answer_prompt(driver, text):
    field = wait(driver, EC.visibility_of_element_located((By.ID, "prompt-input")))
    field.clear()
    field.send_keys(text)
    driver.find_element(By.ID, "prompt-ok").click()


def make_file(server, name, size):
    path = server["work"] / name
    path.write_bytes(os.urandom(size))
    return path


def ffmpeg(server, name, *arguments):
    path = server["work"] / name
    subprocess.run(["ffmpeg", "-v", "error", "-y", *arguments, str(path)], check=True)
    return path


def upload_done(driver, path, count=1):
    driver.find_element(By.ID, "file-input").send_keys(str(path))
    wait(driver, lambda d: len(d.find_elements(By.XPATH, f"//ul[@id='upload-list']/li[@data-name='{path.name}'][contains(., 'Done')]")) >= count, timeout=60)
    driver.find_element(By.ID, "upload-close").click()


def press(driver, *keys):
    ActionChains(driver).send_keys(*keys).perform()


def test_security_headers_and_no_external_assets(server):
    status, headers, body = call(server["base"], "GET", "/")
    assert status == 200
    policy = headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "media-src 'self' blob:" in policy and "frame-ancestors 'none'" in policy
    assert headers["X-Content-Type-Options"] == "nosniff"
    html = body.decode()
    assert "http://" not in html and "https://" not in html, "everything is served by the server itself"
    modules = sorted(p.name for p in (ROOT / "web/js").glob("*.js"))
    assert len(modules) >= 8, "the app is split by concern"
    for module in modules:
        status, headers, script = call(server["base"], "GET", f"/js/{module}")
        assert status == 200 and headers["Content-Type"].startswith("text/javascript")
        assert 'from "http' not in script.decode() and "import(" not in script.decode(), module
    for bad in ["/js/nothing.js", "/js/..%2Fapp.css", "/js/.hidden.js"]:
        with pytest.raises(urllib.error.HTTPError) as refused:
            call(server["base"], "GET", bad)
        assert refused.value.code == 404


def test_sign_in(browser, server):
    browser.get(server["base"] + "/")
    screenshot(browser, "sign-in")
    browser.find_element(By.ID, "login-username").send_keys("webby")
    browser.find_element(By.ID, "login-password").send_keys("wrong password")
    browser.find_element(By.ID, "login-submit").click()
    alert = wait(browser, EC.visibility_of_element_located((By.ID, "alert")))
    assert "Wrong username or password" in alert.text
    browser.find_element(By.ID, "login-password").clear()
    browser.find_element(By.ID, "login-password").send_keys("correct horse")
    browser.find_element(By.ID, "login-submit").click()
    wait(browser, EC.visibility_of_element_located((By.ID, "files-view")))
    assert "webby" in browser.find_element(By.ID, "whoami").text
    assert "accessToken" not in browser.current_url


def test_create_folder(browser):
    browser.find_element(By.ID, "new-button").click()
    wait(browser, EC.element_to_be_clickable((By.ID, "new-folder"))).click()
    answer_prompt(browser, "Projects")
    assert "Projects" in row_text(browser, "Projects")
    wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, '#files-list [data-name="Projects"] svg.ico-folder')))


def test_upload_with_progress(browser, server):
    path = make_file(server, "video.bin", 24 * CHUNK + 1234)
    browser.find_element(By.ID, "file-input").send_keys(str(path))
    item = wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, '#upload-list li[data-name="video.bin"]')))
    seen = set()
    deadline = time.time() + 60
    while time.time() < deadline:
        value = float(item.find_element(By.TAG_NAME, "progress").get_attribute("value"))
        seen.add(round(value, 3))
        if "Done" in item.text:
            break
        time.sleep(0.02)
    assert "Done" in item.text
    assert any(0 < value < 1 for value in seen), f"progress moved through chunks: {sorted(seen)}"
    screenshot(browser, "upload")
    browser.find_element(By.ID, "upload-close").click()
    assert "MiB" in row_text(browser, "video.bin")


def test_cancel_upload(browser, server):
    path = make_file(server, "huge.bin", 400 * CHUNK)
    browser.find_element(By.ID, "file-input").send_keys(str(path))
    item = wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, '#upload-list li[data-name="huge.bin"]')))
    wait(browser, lambda d: "chunks" in item.text or "Done" in item.text)
    item.find_element(By.TAG_NAME, "button").click()
    wait(browser, lambda d: "Cancelled" in item.text)
    browser.find_element(By.ID, "upload-close").click()
    time.sleep(0.5)
    assert "huge.bin" not in [f["name"] for f in listing(server)]


def test_upload_resumes_after_reload(browser, server):
    path = make_file(server, "resume.bin", 160 * CHUNK)
    browser.find_element(By.ID, "file-input").send_keys(str(path))
    item = wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, '#upload-list li[data-name="resume.bin"]')))
    wait(browser, lambda d: float(item.find_element(By.TAG_NAME, "progress").get_attribute("value")) > 0.05)
    browser.refresh()  # the page goes away mid-upload
    wait(browser, EC.visibility_of_element_located((By.ID, "files-view")))
    browser.find_element(By.ID, "file-input").send_keys(str(path))
    item = wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, '#upload-list li[data-name="resume.bin"]')))
    wait(browser, lambda d: "Done" in item.text, timeout=120)
    assert "resumed from chunk" in item.text, item.text
    browser.find_element(By.ID, "upload-close").click()
    uploaded = next(f for f in listing(server) if f["name"] == "resume.bin")
    assert uploaded["checksum"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_upload_a_whole_folder(browser, server):
    """A folder picked whole: its folders are made, every file lands in its place, Unicode names kept."""
    folder = server["work"] / "Álbum"
    (folder / "2026" / "März").mkdir(parents=True)
    (folder / "cover.txt").write_text("cover")
    (folder / "2026" / "März" / "día.txt").write_text("día uno")
    browser.find_element(By.ID, "folder-input").send_keys(str(folder))
    wait(browser, lambda d: len(d.find_elements(By.XPATH, "//ul[@id='upload-list']/li[contains(., 'Done')][@data-name='día.txt' or @data-name='cover.txt']")) == 2, timeout=60)
    browser.find_element(By.ID, "upload-close").click()
    album_id = retrying(lambda: row(browser, "Álbum").get_attribute("data-id"))
    inside = {f["name"]: f for f in listing(server, album_id)}
    assert set(inside) == {"2026", "cover.txt"}
    march = next(f for f in listing(server, inside["2026"]["id"]) if f["name"] == "März")
    day = next(f for f in listing(server, march["id"]) if f["name"] == "día.txt")
    _, _, content = call(server["base"], "GET", day["downloadUrl"], token=server["token"])
    assert content.decode() == "día uno"


def test_drop_files_onto_the_folder(browser, server):
    """Files dropped onto a folder's page upload there (a drop made in the page: WebDriver cannot drag from the desktop)."""
    projects = retrying(lambda: row(browser, "Projects").get_attribute("data-id"))
    browser.get(server["base"] + f"/#/files/{projects}")
    wait(browser, lambda d: "Projects" in d.find_element(By.ID, "breadcrumbs").text)
    browser.execute_script("""
        const transfer = new DataTransfer();
        transfer.items.add(new File(["dropped one"], "dropped.txt", { type: "text/plain" }));
        const zone = document.getElementById("files-view");
        zone.dispatchEvent(new DragEvent("dragover", { dataTransfer: transfer, bubbles: true, cancelable: true }));
        zone.dispatchEvent(new DragEvent("drop", { dataTransfer: transfer, bubbles: true, cancelable: true }));
    """)
    wait(browser, lambda d: len(d.find_elements(By.XPATH, "//ul[@id='upload-list']/li[@data-name='dropped.txt'][contains(., 'Done')]")) == 1)
    browser.find_element(By.ID, "upload-close").click()
    row(browser, "dropped.txt")
    dropped = next(f for f in listing(server, projects) if f["name"] == "dropped.txt")
    _, _, content = call(server["base"], "GET", dropped["downloadUrl"], token=server["token"])
    assert content == b"dropped one"
    retrying(lambda: browser.find_element(By.CSS_SELECTOR, "#breadcrumbs a").click())
    row(browser, "Projects")


def test_rename(browser):
    menu(browser, "video.bin", "Rename")
    answer_prompt(browser, "movie.bin")
    row(browser, "movie.bin")
    gone(browser, "video.bin")


def test_delete_and_restore_from_trash(browser):
    menu(browser, "Projects", "Delete")
    gone(browser, "Projects")
    place(browser, "trash")
    row(browser, "Projects", "trash-rows")
    screenshot(browser, "trash")
    click_in_row(browser, "Projects", "Restore", "trash-rows")
    wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, '#trash-rows tr[data-name="Projects"]'))
    place(browser, "files")
    row(browser, "Projects")


def test_replace_then_restore_revision(browser, server):
    first = make_file(server, "notes.txt", 100)
    original = first.read_bytes()
    upload_done(browser, first)
    row(browser, "notes.txt")
    first.write_bytes(b"second version")
    browser.find_element(By.ID, "file-input").send_keys(str(first))
    wait(browser, EC.visibility_of_element_located((By.ID, "clash-dialog")))
    screenshot(browser, "upload-options")
    browser.find_element(By.ID, "clash-upload").click()  # "Replace existing file" is the default
    wait(browser, lambda d: len(d.find_elements(By.XPATH, "//ul[@id='upload-list']/li[@data-name='notes.txt'][contains(., 'Done')]")) == 2)
    browser.find_element(By.ID, "upload-close").click()
    menu(browser, "notes.txt", "Revisions")
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#revision-list li")) == 2)
    assert "Current version" in browser.find_elements(By.CSS_SELECTOR, "#revision-list li")[0].text
    screenshot(browser, "revisions")
    browser.find_elements(By.CSS_SELECTOR, "#revision-list li")[1].find_element(By.XPATH, ".//button[text()='Restore']").click()
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#revision-list li")) == 3)
    notes = next(f for f in listing(server) if f["name"] == "notes.txt")
    _, _, content = call(server["base"], "GET", notes["downloadUrl"], token=server["token"])
    assert content == original
    browser.find_element(By.ID, "back-from-revisions").click()
    row(browser, "notes.txt")


def test_clash_the_list_did_not_show_yet_asks_too(browser, server):
    """A name the page has not listed (uploading from Home into My Drive) meets the server's 409 and the same dialog."""
    browser.get_log("browser")  # drop what earlier tests logged; this test accounts for its own entries
    call(server["base"], "POST", "/v1/upload?uploadType=media&name=elsewhere.txt", raw=b"made elsewhere", token=server["token"],
         headers={"Content-Type": "text/plain"})
    place(browser, "home")
    local = make_file(server, "elsewhere.txt", 50)
    browser.find_element(By.ID, "file-input").send_keys(str(local))
    wait(browser, EC.visibility_of_element_located((By.ID, "clash-dialog")))
    browser.find_element(By.CSS_SELECTOR, '#clash-dialog input[value="rename"]').click()
    browser.find_element(By.ID, "clash-upload").click()
    wait(browser, lambda d: len(d.find_elements(By.XPATH, "//ul[@id='upload-list']/li[@data-name='elsewhere.txt'][contains(., 'Done')]")) == 1)
    browser.find_element(By.ID, "upload-close").click()
    found = sorted(f["name"] for f in listing(server) if f["name"].startswith("elsewhere"))
    assert len(found) == 2 and "elsewhere.txt" in found, found
    severe = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert len(severe) == 1 and "/v1/upload?uploadType=resumable&onConflict=fail" in severe[0] and "409" in severe[0], severe
    place(browser, "files")


def test_change_from_elsewhere_appears_live(browser, server):
    row(browser, "Projects")
    call(server["base"], "POST", "/v1/files", {"name": "Made elsewhere", "mimeType": "application/vnd.nimbus.folder"}, token=server["token"])
    row(browser, "Made elsewhere")


def test_sortable_columns(browser):
    """Name, size and modified sort both ways (the header says which); folders stay first."""
    header = lambda key: browser.find_element(By.CSS_SELECTOR, f'#files-list button[data-sort="{key}"]')
    folders = ["Álbum", "Made elsewhere", "Projects"]
    wait(browser, lambda d: names(d)[:3] == sorted(folders))
    header("size").click()
    wait(browser, lambda d: names(d)[3:5] == ["elsewhere (1).txt", "elsewhere.txt"] and names(d)[-1] == "resume.bin")
    assert browser.find_element(By.CSS_SELECTOR, '#files-list [role=columnheader][aria-sort="ascending"]').text.startswith("Size")
    header("size").click()
    wait(browser, lambda d: names(d)[3] == "resume.bin")
    assert sorted(names(browser)[:3]) == sorted(folders), "folders first whatever the order"
    header("name").click()
    wait(browser, lambda d: names(d)[3:] == sorted(names(d)[3:]))
    screenshot(browser, "files")


def test_multi_select_and_bulk_actions(browser, server):
    """Click, shift-click and ctrl-click choose; the bulk bar stars, downloads as one zip, moves and deletes them."""
    for name in ["a.txt", "b.txt", "c.txt"]:
        call(server["base"], "POST", f"/v1/upload?uploadType=media&name={name}", raw=name.encode() * 10, token=server["token"],
             headers={"Content-Type": "text/plain"})
    row(browser, "c.txt")
    retrying(lambda: row(browser, "a.txt").click())
    ActionChains(browser).key_down(Keys.SHIFT).click(row(browser, "c.txt")).key_up(Keys.SHIFT).perform()
    wait(browser, lambda d: d.find_element(By.ID, "bulk-count").text == "3 selected")
    ActionChains(browser).key_down(Keys.CONTROL).click(row(browser, "b.txt")).key_up(Keys.CONTROL).perform()
    wait(browser, lambda d: d.find_element(By.ID, "bulk-count").text == "2 selected")
    assert row(browser, "b.txt").get_attribute("aria-selected") == "false"
    assert row(browser, "a.txt").get_attribute("aria-selected") == "true"
    screenshot(browser, "selection")
    browser.find_element(By.ID, "bulk-star").click()
    wait(browser, lambda d: "★" in row_text(d, "a.txt") and "★" in row_text(d, "c.txt"))
    browser.find_element(By.ID, "bulk-download").click()
    archive = server["downloads"] / "Nimbus.zip"
    wait(browser, lambda d: archive.exists() and zipfile.is_zipfile(archive), timeout=30)
    with zipfile.ZipFile(archive) as z:
        assert z.testzip() is None
        assert sorted(z.namelist()) == ["a.txt", "c.txt"]
        assert z.read("a.txt") == b"a.txt" * 10
    browser.find_element(By.ID, "bulk-move").click()
    wait(browser, EC.visibility_of_element_located((By.ID, "move-dialog")))
    wait(browser, EC.element_to_be_clickable((By.XPATH, "//ul[@id='move-folders']//button[normalize-space()='Projects']"))).click()
    wait(browser, lambda d: "Projects" in d.find_element(By.ID, "move-breadcrumbs").text)
    browser.find_element(By.ID, "move-here").click()
    gone(browser, "a.txt")
    gone(browser, "c.txt")
    projects = next(f for f in listing(server) if f["name"] == "Projects")
    assert sorted(f["name"] for f in listing(server, projects["id"])) == ["a.txt", "c.txt", "dropped.txt"]
    place(browser, "starred")
    row(browser, "a.txt", "starred-list")
    screenshot(browser, "starred")
    place(browser, "files")
    retrying(lambda: row(browser, "b.txt").click())
    ActionChains(browser).key_down(Keys.CONTROL).send_keys("a").key_up(Keys.CONTROL).perform()
    wait(browser, lambda d: int(d.find_element(By.ID, "bulk-count").text.split()[0]) == len(listing(server)))
    press(browser, Keys.ESCAPE)
    wait(browser, lambda d: not d.find_element(By.ID, "bulk-bar").is_displayed())


def test_search_as_you_type(browser, server):
    """`/` focuses the search field; results come as you type, case and accents ignored, with where each is."""
    call(server["base"], "POST", "/v1/upload?uploadType=media&name=Caf%C3%A9%20Men%C3%BC.txt", raw=b"menu", token=server["token"], headers={"Content-Type": "text/plain"})
    browser.find_element(By.TAG_NAME, "body").click()
    press(browser, "/")
    assert browser.switch_to.active_element.get_attribute("id") == "search"
    assert browser.find_element(By.ID, "search").get_attribute("type") == "search"
    press(browser, "dia")
    hit = row(browser, "día.txt", "search-list")
    assert "/Álbum/2026/März" in hit.text
    assert "#/search?q=dia" in browser.current_url
    press(browser, Keys.BACKSPACE * 3, "CAFE MENU")
    row(browser, "Café Menü.txt", "search-list")
    screenshot(browser, "search")
    browser.find_element(By.CSS_SELECTOR, '#search-types button[data-type="folder"]').click()
    wait(browser, lambda d: "type=folder" in d.current_url and "Nothing" in d.find_element(By.ID, "search-status").text)
    browser.find_element(By.CSS_SELECTOR, '#search-types button[data-type=""]').click()
    retrying(lambda: row(browser, "Café Menü.txt", "search-list").find_element(By.TAG_NAME, "a").click())
    wait(browser, lambda d: "menu" in d.find_element(By.ID, "preview-body").text)
    press(browser, Keys.ESCAPE)
    wait(browser, EC.invisibility_of_element_located((By.ID, "preview")))
    browser.find_element(By.ID, "search").clear()
    place(browser, "files")


def test_thumbnails_list_and_grid(browser, server):
    photo = ffmpeg(server, "sunset.png", "-f", "lavfi", "-i", "testsrc=size=800x600", "-frames:v", "1")
    upload_done(browser, photo)
    width = "const i = document.querySelector(arguments[0]); return i && i.src.startsWith('blob:') ? i.naturalWidth : 0"
    wait(browser, lambda d: d.execute_script(width, '#files-list [data-name="sunset.png"] .cell.icon img') == 64)
    browser.find_element(By.ID, "view-grid").click()
    wait(browser, lambda d: d.execute_script(width, '#files-list .card[data-name="sunset.png"] .picture img') == 256)
    screenshot(browser, "grid")
    browser.find_element(By.ID, "view-list").click()
    wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, '#files-list .row[data-name="sunset.png"]')))


def test_preview_pane(browser, server):
    """Images, PDFs (the browser's viewer), text and Markdown as text, HTML never rendered, audio and video that seek."""
    files = {
        "readme.md": b"# Title\n\nSome *notes*.",
        "page.html": b"<h1>Hi</h1><script>document.title='pwned'</script>",
    }
    for name, content in files.items():
        kind = "text/markdown" if name.endswith(".md") else "text/html"
        call(server["base"], "POST", f"/v1/upload?uploadType=media&name={name}", raw=content, token=server["token"], headers={"Content-Type": kind})
    clip = ffmpeg(server, "clip.mp4", "-f", "lavfi", "-i", "testsrc=duration=4:size=320x240:rate=10", "-pix_fmt", "yuv420p")
    tone = ffmpeg(server, "tone.wav", "-f", "lavfi", "-i", "sine=frequency=440:duration=3")
    pdf = server["work"] / "doc.pdf"
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=200x150", "-frames:v", "1", str(server["work"] / "page.png")], check=True)
    pdf.write_bytes(minimal_pdf())
    for path in [clip, tone, pdf]:
        upload_done(browser, path)

    def open_row(name):
        retrying(lambda: row(browser, name).find_element(By.TAG_NAME, "a").click())
        wait(browser, lambda d: d.find_element(By.ID, "preview-title").text == name)

    open_row("sunset.png")
    image = wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, "#preview-body img.preview-image")))
    wait(browser, lambda d: d.execute_script("return arguments[0].naturalWidth", image) == 800)
    screenshot(browser, "preview")
    open_row("readme.md")
    text = wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, "#preview-body pre.preview-text")))
    assert "# Title" in text.text
    open_row("page.html")
    source = wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, "#preview-body pre.preview-text")))
    assert "<script>" in source.text and browser.title != "pwned", "HTML is shown as its source, never run"
    open_row("doc.pdf")
    frame = wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, "#preview-body iframe.preview-pdf")))
    assert frame.get_attribute("src").startswith("blob:")
    open_row("clip.mp4")
    video = wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, "#preview-body video.preview-video")))
    wait(browser, lambda d: d.execute_script("return arguments[0].readyState", video) >= 1)
    assert abs(browser.execute_script("return arguments[0].duration", video) - 4) < 0.5
    browser.execute_script("arguments[0].currentTime = 3", video)
    wait(browser, lambda d: d.execute_script("return arguments[0].currentTime", video) > 2.5)
    open_row("tone.wav")
    audio = wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, "#preview-body audio.preview-audio")))
    wait(browser, lambda d: d.execute_script("return arguments[0].readyState", audio) >= 1)
    browser.execute_script("arguments[0].currentTime = 2", audio)
    wait(browser, lambda d: d.execute_script("return arguments[0].currentTime", audio) > 1.5)
    browser.find_element(By.ID, "preview-close").click()
    wait(browser, EC.invisibility_of_element_located((By.ID, "preview")))


def minimal_pdf():
    stream = b"0 0 1 rg 20 20 160 100 re f"
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 140] /Contents 4 0 R >>",
               b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream)]
    out = b"%PDF-1.4\n"
    offsets = []
    for index, body in enumerate(objects):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (index + 1, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return out


def test_keyboard_only(browser, server):
    """Shortcuts under ?, the list walked with arrows, a folder opened with Enter, a file trashed with Delete."""
    browser.find_element(By.TAG_NAME, "body").click()
    press(browser, "?")
    help_dialog = wait(browser, EC.visibility_of_element_located((By.ID, "help-dialog")))
    assert "Search" in help_dialog.text and "Select all" in help_dialog.text
    screenshot(browser, "shortcuts")
    press(browser, Keys.ESCAPE)
    wait(browser, EC.invisibility_of_element_located((By.ID, "help-dialog")))
    press(browser, Keys.ARROW_DOWN)
    assert browser.switch_to.active_element.get_attribute("role") == "row", "the list takes the keyboard"
    press(browser, Keys.HOME)
    assert browser.switch_to.active_element.get_attribute("data-index") == "0"
    press(browser, "j")
    assert browser.switch_to.active_element.get_attribute("data-index") == "1"
    press(browser, "k")
    while browser.switch_to.active_element.get_attribute("data-name") != "Projects":
        press(browser, "j")
    press(browser, Keys.ENTER)
    wait(browser, lambda d: "Projects" in d.find_element(By.ID, "breadcrumbs").text)
    row(browser, "a.txt")
    press(browser, Keys.ARROW_DOWN)
    assert browser.switch_to.active_element.get_attribute("data-name") == "a.txt"
    press(browser, Keys.DELETE)
    gone(browser, "a.txt")
    trashed = [f for f in json.loads(call(server["base"], "GET", "/v1/trash", token=server["token"])[2])["files"] if f["name"] == "a.txt"]
    assert trashed
    # The skip link comes first in the tab order, then the search field.
    browser.get(server["base"] + "/#/files")
    browser.refresh()
    row(browser, "Projects")
    press(browser, Keys.TAB)
    assert "skip" in (browser.switch_to.active_element.get_attribute("class") or "")
    press(browser, Keys.TAB)
    assert browser.switch_to.active_element.get_attribute("href", ) and press(browser, Keys.TAB) is None
    assert browser.switch_to.active_element.get_attribute("id") == "search"


def test_home_activity_and_quota(browser, server):
    place(browser, "home")
    card = row_text_home(browser, "sunset.png")
    assert "You uploaded" in card, card
    screenshot(browser, "home")
    place(browser, "activity")
    entries = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#activity-list li"))
    text = browser.find_element(By.ID, "activity-list").text
    assert "You (Web browser) uploaded sunset.png" in text, text
    assert "You (Web browser) moved a.txt to the trash" in text, text
    assert "You (test) created the folder Made elsewhere" in text, text
    screenshot(browser, "activity")
    quota = browser.find_element(By.ID, "quota-text").text
    assert quota.endswith("used") and not browser.find_element(By.ID, "quota-bar").is_displayed(), quota
    # With a quota (an account the admin command made while the server runs): a bar, and how much of it is used.
    subprocess.run([BINARY, "user", "add", "quotaed", "--quota", "1GiB", "--password-stdin", "--data", str(server["work"] / "server")],
                   input="correct horse\n", text=True, check=True, capture_output=True)
    sign_in_as(browser, "quotaed")
    upload_done(browser, make_file(server, "some.bin", 3 << 20))
    wait(browser, lambda d: "3.0 MiB of 1.0 GiB used" in d.find_element(By.ID, "quota-text").text)
    bar = browser.find_element(By.ID, "quota-bar")
    assert bar.is_displayed() and 0 < float(bar.get_attribute("value")) < float(bar.get_attribute("max"))
    sign_in_as(browser, "webby")


def row_text_home(browser, name):
    return wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, f'#home-recent li[data-name="{name}"]'))).text


def test_big_folder_opens_fast_and_renders_a_window(browser, server):
    """10,000 items: the first rows show within a second, and only a window of rows is ever in the page."""
    base, token = server["base"], server["token"]
    _, _, body = call(base, "POST", "/v1/files", {"name": "Big", "mimeType": "application/vnd.nimbus.folder"}, token=token)
    big = json.loads(body)["id"]
    for batch in range(10):
        entries = [{"name": f"item-{batch * 1000 + i:05d}.txt", "parentId": big, "mimeType": "text/plain", "content": ""} for i in range(1000)]
        status, _, _ = call(base, "POST", "/v1/upload?uploadType=batch", {"files": entries}, token=token)
        assert status == 200
    browser.execute_script("window.__opened = performance.now(); location.hash = arguments[0]", f"#/files/{big}")
    wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, '#files-list [data-name="item-00000.txt"]')))
    first_row = browser.execute_script("return performance.now() - window.__opened")
    assert first_row < 1000, f"first rows after {first_row:.0f} ms"
    wait(browser, lambda d: d.find_element(By.ID, "list-status").text == "")
    in_page = len(browser.find_elements(By.CSS_SELECTOR, "#files-list [role=row][data-name]"))
    assert 10 < in_page < 150, in_page
    browser.execute_script("window.scrollTo(0, document.body.scrollHeight)")
    row(browser, "item-09999.txt")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#files-list [role=row][data-name]")) < 150
    assert browser.find_element(By.CSS_SELECTOR, "#files-list [role=grid]").get_attribute("aria-rowcount") == "10001"
    place(browser, "files")
    row(browser, "Projects")


def test_app_passwords_in_settings(browser, server):
    browser.find_element(By.ID, "settings-button").click()
    field = wait(browser, EC.visibility_of_element_located((By.ID, "app-password-label")))
    field.send_keys("Finder on the laptop")
    browser.find_element(By.ID, "app-password-create").click()
    secret = wait(browser, EC.visibility_of_element_located((By.ID, "app-password-secret"))).text
    assert len(secret) == 29 and secret.count("-") == 4, secret
    assert "Finder on the laptop" in row_text(browser, "Finder on the laptop", "app-password-rows")
    assert secret not in browser.find_element(By.ID, "app-password-rows").text
    _, _, body = call(server["base"], "GET", "/v1/auth/app-passwords", token=server["token"])
    listed = json.loads(body)["appPasswords"]
    assert [entry["label"] for entry in listed] == ["Finder on the laptop"] and "password" not in listed[0]
    screenshot(browser, "app-passwords")
    click_in_row(browser, "Finder on the laptop", "Revoke", "app-password-rows")
    browser.switch_to.alert.accept()
    wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, '#app-password-rows tr[data-name="Finder on the laptop"]'))
    _, _, body = call(server["base"], "GET", "/v1/auth/app-passwords", token=server["token"])
    assert json.loads(body)["appPasswords"] == []
    place(browser, "files")


def test_mass_deletion_paused_then_confirmed(browser, server):
    """Another device (the API's "test") deletes a folder of 31 items: over half of everything in the window, so the
    server pauses it; the Trash says so, Confirm lets it go on, and "Restore all" since a time brings it back."""
    base, token = server["base"], server["token"]
    _, _, body = call(base, "POST", "/v1/files", {"name": "Bulk", "mimeType": "application/vnd.nimbus.folder"}, token=token)
    bulk = json.loads(body)["id"]
    for index in range(30):
        call(base, "POST", "/v1/files", {"name": f"b{index}.txt", "mimeType": "text/plain", "parentId": bulk}, token=token)
    try:
        call(base, "DELETE", f"/v1/files/{bulk}", token=token)
        paused = False
    except urllib.error.HTTPError as error:
        assert error.code == 409 and json.loads(error.read())["error"]["code"] == "mass_deletion_paused"
        paused = True
    if paused:
        place(browser, "trash")
        banner = wait(browser, EC.visibility_of_element_located((By.ID, "deletion-paused")))
        assert "“test” deleted" in banner.text, banner.text
        screenshot(browser, "deletion-paused")
        browser.find_element(By.ID, "confirm-deletions").click()
        wait(browser, EC.invisibility_of_element_located((By.ID, "deletion-paused")))
        status, _, _ = call(base, "DELETE", f"/v1/files/{bulk}", token=token)
        assert status == 204
    place(browser, "files")
    place(browser, "trash")
    row(browser, "Bulk", "trash-rows")
    # The form's default is an hour ago: everything trashed since comes back.
    browser.find_element(By.CSS_SELECTOR, "#restore-since-form button[type=submit]").click()
    browser.switch_to.alert.accept()
    wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, '#trash-rows tr[data-name="Bulk"]'))
    _, _, body = call(base, "GET", f"/v1/files/{bulk}", token=token)
    assert json.loads(body)["trashed"] is False
    place(browser, "files")
    row(browser, "Bulk")


def sign_in_as(browser, username, password="correct horse"):
    if browser.find_element(By.ID, "sign-out").is_displayed():
        browser.find_element(By.ID, "sign-out").click()
    field = wait(browser, EC.visibility_of_element_located((By.ID, "login-username")))
    field.clear()
    field.send_keys(username)
    browser.find_element(By.ID, "login-password").clear()
    browser.find_element(By.ID, "login-password").send_keys(password)
    browser.find_element(By.ID, "login-submit").click()
    wait(browser, lambda d: username in d.find_element(By.ID, "whoami").text)


def test_share_dialog_and_shared_place(browser, server):
    """Webby shares a folder with a colleague as an editor and makes a password link in the dialog (the link shown
    once, with a copy button); it is marked shared and listed under Shared. The colleague accepts it there, opens
    it, finds its files by search, and sees it in their drive marked as webby's."""
    base = server["base"]
    call(base, "POST", "/v1/auth/register", {"username": "colleague", "password": "correct horse"})
    place(browser, "files")
    menu(browser, "Projects", "Share")
    wait(browser, EC.visibility_of_element_located((By.ID, "share-dialog")))
    browser.find_element(By.ID, "share-user").send_keys("nobody-here")
    browser.find_element(By.ID, "share-add").click()
    alert = wait(browser, EC.visibility_of_element_located((By.ID, "alert")))
    assert "no user" in alert.text, alert.text
    browser.find_element(By.ID, "share-user").clear()
    browser.find_element(By.ID, "share-user").send_keys("colleague")
    browser.find_element(By.CSS_SELECTOR, '#share-role option[value="editor"]').click()
    browser.find_element(By.ID, "share-add").click()
    person = wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, '#share-people li[data-name="colleague"]')))
    assert "pending" in person.text
    browser.find_element(By.ID, "link-password").send_keys("short")
    browser.find_element(By.ID, "link-create").click()
    assert not browser.find_element(By.ID, "link-new").is_displayed(), "a weak password makes no link"
    browser.find_element(By.ID, "link-password").clear()
    browser.find_element(By.ID, "link-password").send_keys("a long secret")
    browser.find_element(By.ID, "link-create").click()
    url = wait(browser, EC.visibility_of_element_located((By.ID, "link-url"))).text
    assert "/s/" in url and len(url.rsplit("/", 1)[1]) >= 20, url
    wait(browser, lambda d: "password" in d.find_element(By.ID, "share-links").text)
    assert url.rsplit("/", 1)[1] not in browser.find_element(By.ID, "share-links").text, "lists never show the token"
    screenshot(browser, "share-dialog")
    browser.find_element(By.ID, "link-copy").click()
    wait(browser, EC.visibility_of_element_located((By.ID, "alert")))
    browser.find_element(By.ID, "share-close").click()
    wait(browser, lambda d: "Shared" in row_text(d, "Projects"))
    place(browser, "shared")
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, '#outgoing-rows tr[data-name="Projects"]')) == 2)
    text = browser.find_element(By.ID, "outgoing-rows").text
    assert "colleague (pending)" in text and "editor" in text and "link: view" in text, text

    sign_in_as(browser, "colleague")
    place(browser, "shared")
    click_in_row(browser, "Projects", "Accept", "incoming-rows")
    wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, '#incoming-rows tr[data-name="Projects"][data-state="accepted"]')))
    screenshot(browser, "shared")
    click_in_row(browser, "Projects", "Open", "incoming-rows")
    wait(browser, lambda d: "Projects" in d.find_element(By.ID, "breadcrumbs").text)
    row(browser, "c.txt")
    browser.find_element(By.ID, "search").send_keys("c.tx")
    hit = row(browser, "c.txt", "search-list")
    assert "/Projects" in hit.text
    browser.find_element(By.ID, "search").clear()
    place(browser, "files")
    wait(browser, lambda d: "from webby" in row_text(d, "Projects"))
    sign_in_as(browser, "webby")


def test_phone_layout(browser, server):
    """390 × 844: no place scrolls sideways, the places sit behind ☰, the preview covers the page, and New offers
    the camera."""
    browser.set_window_size(390, 844)
    try:
        for name in ["files", "home", "starred", "shared", "activity", "trash", "settings", "search"]:
            browser.get(server["base"] + f"/#/{name}" + ("?q=txt" if name == "search" else ""))
            wait(browser, EC.visibility_of_element_located((By.ID, f"{name}-view")))
            time.sleep(0.3)
            width = browser.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
            assert width[0] <= width[1], f"{name} scrolls sideways: {width}"
        browser.get(server["base"] + "/#/files")
        row(browser, "Projects")
        screenshot(browser, "phone")
        assert not browser.find_element(By.CSS_SELECTOR, '#nav a[data-place="home"]').is_displayed()
        browser.find_element(By.ID, "menu-button").click()
        wait(browser, EC.visibility_of_element_located((By.CSS_SELECTOR, '#nav a[data-place="home"]')))
        screenshot(browser, "phone-places")
        browser.find_element(By.CSS_SELECTOR, '#nav a[data-place="files"]').click()
        wait(browser, EC.invisibility_of_element_located((By.CSS_SELECTOR, '#nav a[data-place="home"]')))
        browser.find_element(By.ID, "new-fab").click()
        wait(browser, EC.visibility_of_element_located((By.ID, "take-photo")))
        camera = browser.find_element(By.ID, "camera-input")
        assert camera.get_attribute("capture") == "environment" and camera.get_attribute("accept") == "image/*"
        browser.find_element(By.ID, "new-close").click()
        retrying(lambda: row(browser, "sunset.png").find_element(By.TAG_NAME, "a").click())
        wait(browser, EC.visibility_of_element_located((By.CSS_SELECTOR, "#preview-body img.preview-image")))
        width = browser.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1], f"the preview scrolls sideways: {width}"
        screenshot(browser, "phone-preview")
        browser.find_element(By.ID, "preview-close").click()
    finally:
        browser.set_window_size(1280, 900)


def test_accessibility(browser, server):
    """axe-core (axe-selenium-python) on every place and the dialogs: no serious or critical violations."""
    from axe_selenium_python import Axe
    axe = Axe(browser)
    problems = []
    for name in ["files", "home", "starred", "shared", "activity", "trash", "settings", "search"]:
        browser.get(server["base"] + f"/#/{name}" + ("?q=txt" if name == "search" else ""))
        wait(browser, EC.visibility_of_element_located((By.ID, f"{name}-view")))
        time.sleep(0.4)
        axe.inject()
        results = axe.run()
        problems += [f"{name}: {v['id']} ({v['impact']}): {v['help']} — {[n['target'] for n in v['nodes']][:3]}"
                     for v in results["violations"] if v["impact"] in ("serious", "critical")]
    browser.get(server["base"] + "/#/files")
    row(browser, "Projects")
    browser.find_element(By.TAG_NAME, "body").click()
    press(browser, "?")
    wait(browser, EC.visibility_of_element_located((By.ID, "help-dialog")))
    axe.inject()
    problems += [f"help: {v['id']}: {v['help']}" for v in axe.run()["violations"] if v["impact"] in ("serious", "critical")]
    press(browser, Keys.ESCAPE)
    assert problems == [], "\n".join(problems)


def test_no_console_errors(browser):
    # (401: a token refreshed; the 404 of sharing with a user who does not exist is the answer the test asked for;
    # a thumbnail's 404 is an item without one, which the list shows as its icon.)
    severe = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE" and "401" not in entry["message"]
              and not ("/grants" in entry["message"] and "404" in entry["message"])
              and not ("/thumbnail" in entry["message"] and "404" in entry["message"])]
    assert severe == [], severe
