"""Drives the toolbox console in headless Chromium (Selenium), for toolbox/tests/console_browser.rs.

    console_test.py approval URL SCREENSHOT_DIR
        Opens the console, opens session `browser-test`, sends a message, waits for the approval
        card, clicks Approve, waits for the tool's result and the model's final text; sends a
        second message and denies its call (the screenshot is taken before that answer);
        steps through the trajectory; reloads the page, which replays the session's events.
    console_test.py token URL SCREENSHOT_DIR TOKEN
        Against a server with a token: the console asks for it, and lists the sessions once
        it has it.

Prints one JSON object on stdout: {"ok": bool, "stage": ..., "error": ..., what the page
showed, "console": the browser's console errors}. Exit codes: 0 passed, 1 a check failed,
2 the browser or its driver could not start, 3 selenium is not installed.
"""

import json
import os
import shutil
import sys
import time

try:
    from selenium import webdriver
    from selenium.common.exceptions import TimeoutException, WebDriverException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError as e:
    print(json.dumps({"ok": False, "stage": "import", "error": f"selenium is not installed ({e}); run scripts/test.sh"}))
    sys.exit(3)

WAIT = 30  # seconds for anything the page waits on
CHROMEDRIVER = "/usr/bin/chromedriver"


def browser():
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,800",
                 "--force-device-scale-factor=1", "--disable-gpu", "--no-first-run",
                 "--disable-extensions", "--force-color-profile=srgb"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    # The page itself 1280x800, whatever the window's frame takes.
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False})
    return driver


def console_errors(driver):
    try:
        return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    except WebDriverException:
        return []


def text_of(driver, selector):
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, selector)]


def visible(driver, selector, timeout=WAIT):
    return WebDriverWait(driver, timeout).until(EC.visibility_of_element_located((By.CSS_SELECTOR, selector)))


def until(driver, what, timeout=WAIT):
    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(lambda d: what(d))


def open_session(driver, sid):
    box = visible(driver, "#session-input")
    box.clear()
    box.send_keys(sid)
    driver.find_element(By.CSS_SELECTOR, "#open-session").click()
    visible(driver, "#session")
    until(driver, lambda d: d.find_element(By.CSS_SELECTOR, "#stream-state").text == "live")


def send(driver, message):
    box = driver.find_element(By.CSS_SELECTOR, "#message")
    box.send_keys(message)
    driver.find_element(By.CSS_SELECTOR, "#send").click()


def answer(driver, decision):
    """Waits for an approval card with buttons, clicks `decision`; the card's call id and text."""
    card = visible(driver, ".approval:not(.answered)")
    call_id = card.get_attribute("data-call-id")
    text = card.text
    card.find_element(By.CSS_SELECTOR, f'button[data-decision="{decision}"]').click()
    return call_id, text


def finished_call(driver, call_id):
    """Waits for the call's result on the page; its status and result texts."""
    call = f'.call[data-call-id="{call_id}"]'
    result = until(driver, lambda d: [e for e in d.find_elements(By.CSS_SELECTOR, call + " pre.result") if e.text])
    return driver.find_element(By.CSS_SELECTOR, call + " .status").text, result[0].text


def approval(driver, url, shots, report):
    report["stage"] = "open the console"
    driver.get(url)
    report["stage"] = "open a session"
    open_session(driver, "browser-test")
    report["stage"] = "send a message"
    send(driver, "Please write hello.txt")
    report["stage"] = "wait for the approval card, approve"
    call_id, report["approval_card"] = answer(driver, "approve")
    report["approval_call_id"] = call_id
    report["stage"] = "wait for the answer on the card"
    answered = f'.approval[data-call-id="{call_id}"] .answer'
    until(driver, lambda d: d.find_element(By.CSS_SELECTOR, answered).text.strip() != "")
    report["approval_answer"] = driver.find_element(By.CSS_SELECTOR, answered).text
    report["stage"] = "wait for the tool's result"
    report["tool_status"], report["tool_result"] = finished_call(driver, call_id)
    report["stage"] = "wait for the end of the turn"
    visible(driver, ".turn-end")
    report["turn_end"] = text_of(driver, ".turn-end")
    report["texts"] = text_of(driver, "#events .text")
    until(driver, lambda d: d.find_element(By.CSS_SELECTOR, "#turn-state").text == "idle")

    report["stage"] = "a second turn, denied"
    send(driver, "Now write bye.txt")
    visible(driver, ".approval:not(.answered)")
    time.sleep(0.3)  # let the page settle for the screenshot: a finished turn and a question
    driver.save_screenshot(os.path.join(shots, "console.png"))
    call_id, _ = answer(driver, "deny")
    report["denied_call_id"] = call_id
    report["denied_status"], report["denied_result"] = finished_call(driver, call_id)
    until(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".turn-end")) == 2)
    report["texts"] = text_of(driver, "#events .text")
    report["turn_state"] = driver.find_element(By.CSS_SELECTOR, "#turn-state").text
    driver.find_element(By.CSS_SELECTOR, "#refresh-sessions").click()
    until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, '#sessions button[data-session="browser-test"]'))

    report["stage"] = "replay the trajectory"
    driver.find_element(By.CSS_SELECTOR, '.tab[data-view="replay"]').click()
    position = lambda d: d.find_element(By.CSS_SELECTOR, "#replay-pos").text  # noqa: E731
    until(driver, lambda d: position(d).startswith("call 1 "))
    report["replay"] = [[position(driver), driver.find_element(By.CSS_SELECTOR, "#replay-call").text]]
    driver.find_element(By.CSS_SELECTOR, "#replay-next").click()
    until(driver, lambda d: position(d).startswith("call 2 "))
    report["replay"].append([position(driver), driver.find_element(By.CSS_SELECTOR, "#replay-call").text])
    report["replay_next_disabled"] = not driver.find_element(By.CSS_SELECTOR, "#replay-next").is_enabled()
    driver.find_element(By.CSS_SELECTOR, '.tab[data-view="messages"]').click()
    until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#messages .message"))
    report["messages"] = [e.get_attribute("textContent") for e in driver.find_elements(By.CSS_SELECTOR, "#messages .who")]

    report["stage"] = "a reload replays the events"
    driver.refresh()
    until(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".turn-end")) == 2)
    report["replayed_answers"] = text_of(driver, ".approval .answer")
    report["stage"] = "done"


def token(driver, url, shots, secret, report):
    report["stage"] = "open the console"
    driver.get(url)
    report["stage"] = "wait for the token prompt"
    field = visible(driver, "#token-input")
    report["auth_message"] = driver.find_element(By.CSS_SELECTOR, "#auth-message").text
    field.send_keys(secret)
    driver.find_element(By.CSS_SELECTOR, "#token-save").click()
    report["stage"] = "the sessions load with the token"
    until(driver, lambda d: not d.find_element(By.CSS_SELECTOR, "#auth").is_displayed())
    until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, '#sessions button[data-session="earlier"]'))
    until(driver, lambda d: d.find_element(By.CSS_SELECTOR, "#health").text.startswith("v"))
    report["health"] = driver.find_element(By.CSS_SELECTOR, "#health").text
    report["stored_token"] = driver.execute_script("return sessionStorage.getItem('toolbox.token')") == secret
    report["stage"] = "the event stream sends the token"
    open_session(driver, "earlier")
    driver.save_screenshot(os.path.join(shots, "token.png"))
    report["stage"] = "done"


def main():
    mode, url, shots = sys.argv[1], sys.argv[2], sys.argv[3]
    report = {"ok": False, "stage": "start the browser", "mode": mode}
    try:
        driver = browser()
    except WebDriverException as e:
        report["error"] = f"cannot start chromium through {CHROMEDRIVER}: {e.msg}"
        print(json.dumps(report))
        return 2
    code = 1
    try:
        if mode == "approval":
            approval(driver, url, shots, report)
        elif mode == "token":
            token(driver, url, shots, sys.argv[4], report)
        else:
            raise SystemExit(f"unknown mode {mode}")
        report["ok"] = True
        code = 0
    except TimeoutException:
        report["error"] = f"timed out after {WAIT} s at: {report['stage']}"
    except WebDriverException as e:
        report["error"] = f"webdriver: {e.msg}"
    finally:
        report["console"] = console_errors(driver)
        if not report["ok"]:
            try:
                driver.save_screenshot(os.path.join(shots, "failure.png"))
                report["page"] = driver.find_element(By.TAG_NAME, "body").text[-3000:]
            except WebDriverException:
                pass
        driver.quit()
    print(json.dumps(report))
    return code


if __name__ == "__main__":
    sys.exit(main())
