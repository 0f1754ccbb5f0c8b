"""Nextcloud's Login Flow v2 driven through the real login page in Chromium (Selenium), against the real `nimbus serve`:
the app asks, the person signs in and grants on the page, the app's poll gets an app password once — and the real
desktop sync engine (nextcloudcmd, when installed) signs in with it.

Run by scripts/test with the other browser tests.
"""
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.parse
import urllib.request

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC

from chromium import make_driver, wait

ROOT = pathlib.Path(__file__).resolve().parents[2]
BINARY = os.environ.get("NIMBUS_BINARY", str(ROOT / ".build/debug/nimbus"))
ARTIFACTS = ROOT / "artifacts/screenshots"
DESKTOP_AGENT = "Mozilla/5.0 (Linux) mirall/3.7.3 (Nextcloud, debian-6.1.0 ClientArchitecture: x86_64 OsArchitecture: x86_64)"


def request(base, method, path, data=None, headers=None):
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.fixture(scope="module")
def server():
    data = tempfile.mkdtemp(prefix="nimbus-flow-")
    process = subprocess.Popen(
        [BINARY, "serve", "--data", data + "/server", "--port", "0", "--allow-registration", "--log-level", "error"],
        stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    base = "http://127.0.0.1:" + line.rsplit(":", 1)[1].strip()
    body = json.dumps({"username": "flowy", "password": "correct horse"}).encode()
    request(base, "POST", "/v1/auth/register", body, {"Content-Type": "application/json"})
    _, tokens = request(base, "POST", "/v1/auth/login", body, {"Content-Type": "application/json"})
    yield {"base": base, "token": json.loads(tokens)["accessToken"], "work": pathlib.Path(data)}
    process.terminate()
    process.wait(timeout=30)
    shutil.rmtree(data, ignore_errors=True)


@pytest.fixture(scope="module")
def browser():
    driver = make_driver()
    yield driver
    driver.quit()


def screenshot(driver, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def poll(base, endpoint, token):
    path = endpoint[len(base):]
    return request(base, "POST", path, urllib.parse.urlencode({"token": token}).encode(),
                   {"Content-Type": "application/x-www-form-urlencoded"})


def test_login_flow_v2_through_the_login_page(server, browser):
    base = server["base"]
    status, body = request(base, "POST", "/index.php/login/v2", b"", {"User-Agent": DESKTOP_AGENT})
    assert status == 200, body
    flow = json.loads(body)
    endpoint, token = flow["poll"]["endpoint"], flow["poll"]["token"]
    assert endpoint == base + "/index.php/login/v2/poll"
    assert poll(base, endpoint, token)[0] == 404, "nothing granted yet"

    # The page names the app asking, in the web app's style.
    browser.get(flow["login"])
    name = wait(browser, EC.visibility_of_element_located((By.ID, "client-name")))
    assert name.text == "Nextcloud desktop (Linux)"
    assert browser.find_element(By.CSS_SELECTOR, "header.bar .brand").text == "Nimbus"
    screenshot(browser, "login-flow-sign-in")

    # A wrong password says so and grants nothing.
    browser.find_element(By.ID, "user").send_keys("flowy")
    browser.find_element(By.ID, "password").send_keys("wrong")
    browser.find_element(By.ID, "submit-signin").click()
    error = wait(browser, EC.visibility_of_element_located((By.ID, "error")))
    assert "Wrong user name or password" in error.text
    assert poll(base, endpoint, token)[0] == 404

    browser.find_element(By.ID, "user").send_keys("flowy")
    browser.find_element(By.ID, "password").send_keys("correct horse")
    browser.find_element(By.ID, "submit-signin").click()
    grant = wait(browser, EC.element_to_be_clickable((By.ID, "submit-grant")))
    assert "Nextcloud desktop (Linux)" in browser.find_element(By.TAG_NAME, "main").text
    assert poll(base, endpoint, token)[0] == 404, "signed in, not granted yet"
    screenshot(browser, "login-flow-grant")
    grant.click()
    done = wait(browser, EC.visibility_of_element_located((By.ID, "granted")))
    assert "Account connected" in done.text
    screenshot(browser, "login-flow-connected")
    # The wrong password's page was a 401, as it should be; nothing else went wrong (CSP, missing assets).
    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE" and "401" not in entry["message"]]
    assert not errors, errors

    # The poll answers once.
    status, body = poll(base, endpoint, token)
    assert status == 200, body
    credentials = json.loads(body)
    assert credentials["server"] == base and credentials["loginName"] == "flowy"
    assert poll(base, endpoint, token)[0] == 404, "and never again"

    # The credentials are an app password: WebDAV and OCS take them; it is listed with the app's name.
    import base64
    basic = "Basic " + base64.b64encode(f"flowy:{credentials['appPassword']}".encode()).decode()
    assert request(base, "PROPFIND", "/remote.php/dav/files/flowy/", None, {"Authorization": basic, "Depth": "0"})[0] == 207
    status, body = request(base, "GET", "/ocs/v2.php/cloud/user?format=json", None, {"Authorization": basic, "OCS-APIRequest": "true"})
    assert status == 200 and json.loads(body)["ocs"]["data"]["id"] == "flowy"
    _, listed = request(base, "GET", "/v1/auth/app-passwords", None, {"Authorization": "Bearer " + server["token"]})
    assert [entry["label"] for entry in json.loads(listed)["appPasswords"]] == ["Nextcloud desktop (Linux)"]

    # The real desktop sync engine signs in with them and syncs.
    client = shutil.which("nextcloudcmd")
    if client:
        folder = server["work"] / "laptop"
        folder.mkdir()
        (folder / "hello.txt").write_text("hello")
        os.utime(folder / "hello.txt", (1, 1))
        run = subprocess.run(
            [client, "--non-interactive", "-u", credentials["loginName"], "-p", credentials["appPassword"], str(folder), credentials["server"]],
            capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(server["work"])})
        assert run.returncode == 0, run.stderr[-3000:]
        assert request(base, "GET", "/remote.php/dav/files/flowy/hello.txt", None, {"Authorization": basic}) == (200, b"hello")
