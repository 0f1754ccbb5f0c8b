"""A public link's page (/s/TOKEN) in a real browser: the password prompt, browsing and downloading, a file drop."""
import json
import urllib.error

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC

from chromium import wait
from test_web import browser, call, server  # noqa: F401 (pytest fixtures)


def make_link(server, item_id, body):
    _, _, payload = call(server["base"], "POST", f"/v1/files/{item_id}/links", body, token=server["token"])
    return json.loads(payload)


def folder_with_file(server, name):
    _, _, payload = call(server["base"], "POST", "/v1/files", {"name": name, "mimeType": "application/vnd.nimbus.folder"}, token=server["token"])
    folder = json.loads(payload)
    call(server["base"], "POST", f"/v1/upload?uploadType=media&name=inside.txt&parentId={folder['id']}", raw=b"inside", token=server["token"])
    return folder


def test_password_link_page_browses_the_folder(browser, server):
    folder = folder_with_file(server, "Linked")
    link = make_link(server, folder["id"], {"access": "view", "password": "correct horse"})
    status, headers, body = call(server["base"], "GET", "/s/" + link["token"])
    assert status == 200 and "script-src 'self'" in headers["Content-Security-Policy"]
    assert link["token"] not in body.decode(), "the page does not carry the token"
    browser.get(server["base"] + "/s/" + link["token"])
    field = wait(browser, EC.visibility_of_element_located((By.ID, "link-password")))
    field.send_keys("wrong horse")
    browser.find_element(By.ID, "password-submit").click()
    wait(browser, EC.text_to_be_present_in_element((By.ID, "alert"), "not right"))
    field.clear()
    field.send_keys("correct horse")
    browser.find_element(By.ID, "password-submit").click()
    row = wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, '#item-rows tr[data-name="inside.txt"]')))
    assert "Download" in row.text
    assert "View only" in browser.find_element(By.ID, "link-kind").text


def test_upload_link_page_sends_files(browser, server, tmp_path):
    folder = folder_with_file(server, "Dropbox")
    link = make_link(server, folder["id"], {"access": "upload"})
    browser.get(server["base"] + "/s/" + link["token"])
    wait(browser, EC.visibility_of_element_located((By.ID, "drop-input")))
    assert not browser.find_element(By.ID, "browse-view").is_displayed(), "a file drop shows nothing of the folder"
    sent = tmp_path / "report.txt"
    sent.write_bytes(b"a report")
    browser.find_element(By.ID, "drop-input").send_keys(str(sent))
    wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, '#drop-list li.sent[data-name="report.txt"]')))
    _, _, payload = call(server["base"], "GET", f"/v1/files?parentId={folder['id']}", token=server["token"])
    assert sorted(f["name"] for f in json.loads(payload)["files"]) == ["inside.txt", "report.txt"]


def test_ended_link_page_says_so(browser, server):
    folder = folder_with_file(server, "Gone")
    link = make_link(server, folder["id"], {"access": "view"})
    call(server["base"], "DELETE", "/v1/links/" + link["id"], token=server["token"])
    browser.get(server["base"] + "/s/" + link["token"])
    wait(browser, EC.text_to_be_present_in_element((By.ID, "alert"), "no longer works"))
