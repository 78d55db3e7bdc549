"""Drives the toolbox console in headless Chromium (Selenium), for toolbox/tests/console_browser.rs.

    console_test.py approval URL SCREENSHOT_DIR
        Opens the console, opens session `browser-test`, sends a message, waits for the approval
        card, clicks Approve, waits for the tool's result and the model's final text; sends a
        second message and denies its call (the screenshot is taken before that answer);
        steps through the trajectory; reloads the page, which replays the session's events.
    console_test.py token URL SCREENSHOT_DIR TOKEN
        Against a server with a token: the console asks for it, and lists the sessions once
        it has it.
    console_test.py progress URL SCREENSHOT_DIR
        Issue 39 point 4: a turn whose data__validate reports progress; the call's card keeps
        the latest report (its words, and a bar at the end once the call is done).
    console_test.py layout URL SCREENSHOT_DIR
        Issue 38 point 6, at 1280x900 and again at 420x800: a plan reviewed (the plan panel,
        the question's buttons in sight, the answered card read-only), two calls of one reply
        (the second waiting to be asked, not running), a Markdown table; boxes measured.
    console_test.py attention URL SCREENSHOT_DIR
        Two sessions, one waiting: session `alpha`'s call waits for approval while session
        `beta` is open; the sidebar and the tab's title say so, live. In `beta`: the model's
        Markdown (with a <script> in it), a failed model request, two direct tool calls
        waiting at once (only the first can be answered). A turn started over HTTP in
        `gamma` appears in the list without a reload. The page at 420 px wide. Then `alpha`'s
        call is approved, with its time and its wait. Last, the renderers on values no server
        sends yet (a preview with a diff, a wait).

Prints one JSON object on stdout: {"ok": bool, "stage": ..., "error": ..., what the page
showed, "console": the browser's console errors}. Exit codes: 0 passed, 1 a check failed,
2 the browser or its driver could not start, 3 selenium is not installed.
"""

import json
import os
import shutil
import sys
import threading
import time
import urllib.request

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
    # The list follows the sessions live: the new session appears without a refresh.
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

def review(driver, url, shots, report):
    """A plan review: the checklist beside the conversation, feedback typed, Approve clicked."""
    report["stage"] = "open the console"
    driver.get(url)
    open_session(driver, "review-test")
    report["stage"] = "send a message"
    send(driver, "Plan, then write")
    report["stage"] = "wait for the review card"
    card = visible(driver, ".approval.review:not(.answered)")
    call_id = card.get_attribute("data-call-id")
    report["review_call_id"] = call_id
    report["review_card"] = card.text
    report["stage"] = "the plan panel shows the checklist"
    until(driver, lambda d: "Write hello.txt" in d.find_element(By.CSS_SELECTOR, "#plan-checklist").text)
    report["plan_panel"] = text_of(driver, "#plan-checklist")
    report["stage"] = "type feedback, approve"
    card.find_element(By.CSS_SELECTOR, "textarea.feedback").send_keys("Looks right.")
    time.sleep(0.2)
    driver.save_screenshot(os.path.join(shots, "review.png"))
    card.find_element(By.CSS_SELECTOR, 'button[data-decision="approve"]').click()
    answered = f'.approval[data-call-id="{call_id}"] .answer'
    until(driver, lambda d: d.find_element(By.CSS_SELECTOR, answered).text.strip() not in ("", "sending…"))
    report["review_answer"] = driver.find_element(By.CSS_SELECTOR, answered).text
    report["stage"] = "wait for the write and the end of the turn"
    report["write_status"], report["write_result"] = finished_call(driver, "w1")
    visible(driver, ".turn-end")
    state = "#plan-panel .part-plan .plan-part-state"
    until(driver, lambda d: d.find_element(By.CSS_SELECTOR, state).text == "approved")
    report["plan_panel_after"] = driver.find_element(By.CSS_SELECTOR, "#plan-panel").text
    report["stage"] = "done"


# What issue 38 point 6 measures, read in one step: the live view's boxes
# (getBoundingClientRect), the open question's buttons, the plan panel's labels.
LAYOUT_PROBE = r"""
const rect = (node) => {
  if (!node) return null;
  const r = node.getBoundingClientRect();
  return {left: r.left, top: r.top, right: r.right, bottom: r.bottom, width: r.width, height: r.height};
};
const q = (sel) => document.querySelector(sel);
const card = arguments[0] ? q(`.approval[data-call-id="${arguments[0]}"]`) : null;
const panel = q('#plan-panel');
const doc = document.documentElement;
return {
  viewport: [window.innerWidth, window.innerHeight],
  scroll: [doc.scrollWidth, doc.clientWidth, window.scrollY],
  main: rect(q('#main')),
  log: rect(q('#events')),
  composer: rect(q('#composer')),
  plan: panel && !panel.hidden ? rect(panel) : null,
  card: rect(card),
  buttons: card ? [...card.querySelectorAll('button.decide')].map((b) => ({
    decision: b.dataset.decision, enabled: !b.disabled, rect: rect(b)})) : [],
  plan_labels: [...document.querySelectorAll('#plan-panel .plan-part-state')].map((e) => e.textContent),
  plan_summary: (q('#plan-summary') || {textContent: ''}).textContent,
  plan_text: panel ? panel.textContent : '',
};
"""

TABLE_PROBE = r"""
const tables = [...document.querySelectorAll('#events .text .md table')];
const table = tables.pop();
const doc = document.documentElement;
if (!table) return {tables: 0, scroll: [doc.scrollWidth, doc.clientWidth],
  text: [...document.querySelectorAll('#events .text')].map((e) => e.textContent)};
const cells = (row) => [...row.children].map((c) => c.textContent);
return {
  tables: tables.length + 1,
  head: [...table.querySelectorAll('thead tr')].map(cells),
  body: [...table.querySelectorAll('tbody tr')].map(cells),
  align: [...table.querySelectorAll('thead th')].map((c) => c.className),
  code: [...table.querySelectorAll('td code')].map((c) => c.textContent),
  strong: [...table.querySelectorAll('td strong')].map((c) => c.textContent),
  scripts: document.querySelectorAll('#events script').length,
  pwned: window.__pwned === undefined ? null : String(window.__pwned),
  pipes: [...document.querySelectorAll('#events .text')].pop().textContent.includes('|---'),
  scroll: [doc.scrollWidth, doc.clientWidth],
};
"""


def resize(driver, width, height):
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    until(driver, lambda d: d.execute_script("return [window.innerWidth, window.innerHeight]") == [width, height])


def status_of(driver, call_id):
    """A call's status badge: its text and its classes, read in one step."""
    return driver.execute_script(
        "const s = document.querySelector(`.call[data-call-id=\"${arguments[0]}\"] .status`);"
        " return s ? [s.textContent, s.className] : null;", call_id)


def layout(driver, url, shots, report):
    """Issue 38 point 6, at 1280x900 and at 420x800: a plan with a review, two calls of one
    reply that both need approval (the second waits its turn to be asked), a Markdown table;
    the boxes measured while each question is open, nothing scrolled by the test."""
    for label, width, height in (("wide", 1280, 900), ("narrow", 420, 800)):
        out = report[label] = {}
        sid = f"layout-{label}"
        report["stage"] = f"{label}: open {sid}"
        resize(driver, width, height)
        driver.get("about:blank")  # a new page load: a change of the hash alone is not one
        driver.get(url + "#" + sid)
        until(driver, lambda d: d.find_element(By.CSS_SELECTOR, "#stream-state").text == "live")
        send(driver, "[layout] plan the release notes, then write them")

        report["stage"] = f"{label}: the plan review is asked"
        until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, '.approval.review[data-call-id="r1"] button.decide'))
        until(driver, lambda d: "Write the notes" in d.find_element(By.CSS_SELECTOR, "#plan-panel").get_attribute("textContent"))
        time.sleep(0.4)  # the page settles (the log scrolls to the question)
        out["review_open"] = driver.execute_script(LAYOUT_PROBE, "r1")
        driver.save_screenshot(os.path.join(shots, f"layout-{label}-review.png"))

        report["stage"] = f"{label}: feedback and Approve"
        review_card = card(driver, "r1")
        review_card.find_element(By.CSS_SELECTOR, "textarea.feedback").send_keys("Looks right, ship it.")
        review_card.find_element(By.CSS_SELECTOR, 'button[data-decision="approve"]').click()
        until(driver, lambda d: "answered" in card(d, "r1").get_attribute("class"))

        report["stage"] = f"{label}: two calls of one reply, the second waits its turn"
        until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, '.approval[data-call-id="w1"] button.decide'))
        until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, '.call[data-call-id="w2"]'))
        asked = out["review_open"]["plan_text"]
        until(driver, lambda d: d.find_element(By.CSS_SELECTOR, "#plan-panel").get_attribute("textContent") != asked)
        time.sleep(0.4)
        out["w1_status"] = status_of(driver, "w1")
        out["w2_status"] = status_of(driver, "w2")
        out["first_open"] = driver.execute_script(LAYOUT_PROBE, "w1")
        review_card = card(driver, "r1")
        out["review_textareas"] = len(review_card.find_elements(By.CSS_SELECTOR, "textarea"))
        out["review_answer"] = review_card.find_element(By.CSS_SELECTOR, ".answer").text
        out["review_card"] = review_card.text
        driver.save_screenshot(os.path.join(shots, f"layout-{label}-queued.png"))

        report["stage"] = f"{label}: approve the first; the second is asked"
        card(driver, "w1").find_element(By.CSS_SELECTOR, 'button[data-decision="approve"]').click()
        until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, '.approval[data-call-id="w2"] button.decide:enabled'))
        time.sleep(0.3)
        out["w2_status_asked"] = status_of(driver, "w2")
        out["second_open"] = driver.execute_script(LAYOUT_PROBE, "w2")
        card(driver, "w2").find_element(By.CSS_SELECTOR, 'button[data-decision="approve"]').click()

        report["stage"] = f"{label}: the table at the end"
        until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".turn-end"))
        out["statuses_after"] = [status_of(driver, "w1"), status_of(driver, "w2")]
        out["table"] = driver.execute_script(TABLE_PROBE)
        out["end"] = driver.execute_script(LAYOUT_PROBE, None)
        driver.save_screenshot(os.path.join(shots, f"layout-{label}-end.png"))
    report["stage"] = "done"


TITLE = "toolbox console"


def post(url, path, body):
    """A JSON POST over loopback, as another client would send it; the reply's JSON."""
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=WAIT) as response:
        return json.loads(response.read() or b"null")


def session_row(driver, sid):
    rows = driver.find_elements(By.CSS_SELECTOR, f'#sessions button[data-session="{sid}"]')
    return rows[0] if rows else None


def row_text(driver, sid):
    """The row's text, read in one step (the list may redraw between two)."""
    return driver.execute_script(
        "const b = document.querySelector(`#sessions button[data-session=\"${arguments[0]}\"]`);"
        " return b ? b.innerText : '';", sid)


def card(driver, call_id):
    return driver.find_element(By.CSS_SELECTOR, f'.approval[data-call-id="{call_id}"]')


def live_buttons(card_element):
    return [b.get_attribute("data-decision") for b in card_element.find_elements(By.CSS_SELECTOR, "button.decide")
            if b.is_enabled()]


def active_cards(driver):
    """How many unanswered approval cards have a button one can click."""
    return sum(1 for c in driver.find_elements(By.CSS_SELECTOR, ".approval:not(.answered)") if live_buttons(c))


def no_sideways_scroll(driver, shots, report, key, shot):
    """At 420 px wide: the page's width fits the window."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 420, "height": 800, "deviceScaleFactor": 1, "mobile": False})
    until(driver, lambda d: d.execute_script("return window.innerWidth") == 420)
    time.sleep(0.2)  # one layout pass after the resize
    widths = driver.execute_script(
        "const e = document.documentElement; return [e.scrollWidth, e.clientWidth, document.body.scrollWidth];")
    report[key] = widths
    driver.save_screenshot(os.path.join(shots, shot))
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False})
    until(driver, lambda d: d.execute_script("return window.innerWidth") == 1280)


MARKDOWN_PROBE = """
const root = [...document.querySelectorAll('#events .text .md')].pop();
if (!root) return null;
const all = (sel) => [...root.querySelectorAll(sel)];
return {
  h2: all('h2').map((e) => e.textContent),
  strong: all('strong').map((e) => e.textContent),
  em: all('em').map((e) => e.textContent),
  code: all('p code').map((e) => e.textContent),
  pre: all('pre code').map((e) => e.textContent),
  ul: all('ul > li').map((e) => e.textContent),
  ol: all('ol > li').map((e) => e.textContent),
  links: all('a').map((e) => [e.getAttribute('href'), e.getAttribute('rel'), e.textContent]),
  scripts: document.querySelectorAll('#events script, #events img').length,
  text: root.textContent,
  pwned: window.__pwned === undefined ? null : String(window.__pwned),
};
"""

RENDERERS = r"""
const c = window.toolboxConsole;
const out = {};
const diff = c.approvalBody({arguments: {path: 'x'}, preview: {
  summary: 'Edit notes.md (output/notes.md): 1 line changed',
  blocks: [
    {kind: 'fields', text: 'path: output/notes.md\nreplace_all: false'},
    {kind: 'diff', text: '--- a/notes.md\n+++ b/notes.md\n@@ -1,2 +1,2 @@\n keep\n-old <b>line</b>\n+new line\n'},
    {kind: 'code', text: '1  print("hi")\n2  <script>bad()</script>'},
    {kind: 'text', text: 'plain <i>text</i>'},
  ]}});
out.summary = diff.querySelector('.preview-summary').textContent;
out.kinds = [...diff.querySelectorAll('pre.block')].map((e) => e.className);
out.diff = ['diff-add', 'diff-del', 'diff-hunk', 'diff-file', 'diff-ctx'].map(
  (k) => diff.querySelectorAll('.' + k).length);
out.removed = diff.querySelector('.diff-del').textContent;
out.markup = diff.querySelectorAll('b, i, script').length;
out.folded_small = diff.querySelector('.fold').classList.contains('folded');
const lines = Array.from({length: 60}, (_, i) => '+line ' + i).join('\n');
const long = c.approvalBody({preview: {summary: 'Write 60 lines', blocks: [{kind: 'diff', text: lines}]}});
out.folded = long.querySelector('.fold').classList.contains('folded');
const toggle = long.querySelector('.fold-toggle');
out.toggle = toggle.textContent;
toggle.click();
out.unfolded = !long.querySelector('.fold').classList.contains('folded');
out.toggle_after = toggle.textContent;
const plain = c.approvalBody({arguments: {path: 'a.txt', content: 'one\ntwo\n', n: 3, empty: '',
  nested: {k: 'v', list: [1, 'x']}}});
out.fallback = plain.querySelector('pre.kv').textContent;
out.fallback_preview = plain.querySelectorAll('.preview-summary').length;
out.as_text = c.keyValueText('{"command": "ls -l\\necho \\"hi\\""}');
out.timing = [c.timing({elapsed_ms: 12, waited_ms: 3400}), c.timing({elapsed_ms: 12}),
  c.timing({elapsed_ms: 1500, waited_ms: 0})];
const md = c.markdown('[x](javascript:alert(1)) <img src=x onerror=alert(1)> [y](/relative) <https://ok.example/>');
out.md_links = [...md.querySelectorAll('a')].map((a) => a.getAttribute('href'));
out.md_img = md.querySelectorAll('img').length;
out.md_text = md.textContent;
return out;
"""


def attention(driver, url, shots, report):
    report["stage"] = "open the console"
    driver.get(url)
    until(driver, lambda d: session_row(d, "earlier"))
    report["refresh_buttons"] = len(driver.find_elements(By.CSS_SELECTOR, "#refresh-sessions"))
    report["earlier_row"] = row_text(driver, "earlier")
    report["earlier_time"] = bool(session_row(driver, "earlier").find_elements(By.CSS_SELECTOR, "time.last-activity"))
    report["title_idle"] = driver.title

    report["stage"] = "alpha: a call waits for approval"
    open_session(driver, "alpha")
    send(driver, "[wait] please write the notes")
    waiting = visible(driver, ".approval:not(.answered)")
    report["alpha_call_id"] = waiting.get_attribute("data-call-id")
    report["alpha_card"] = waiting.text
    report["alpha_has_preview"] = bool(waiting.find_elements(By.CSS_SELECTOR, ".preview-summary"))
    report["alpha_card_json"] = '{"' in waiting.text or '\\n' in waiting.text

    report["stage"] = "beta open: the sidebar and the title say alpha waits"
    open_session(driver, "beta")
    until(driver, lambda d: "waiting 1" in row_text(d, "alpha"))
    report["alpha_row"] = row_text(driver, "alpha")
    until(driver, lambda d: d.title.startswith("(1)"))
    report["title_waiting"] = driver.title

    report["stage"] = "beta: markdown"
    send(driver, "[md] show me markdown")
    until(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".turn-end")) == 1)
    report["markdown"] = driver.execute_script(MARKDOWN_PROBE)

    report["stage"] = "beta: a failed model request"
    until(driver, lambda d: d.find_element(By.CSS_SELECTOR, "#turn-state").text == "idle")
    send(driver, "[fail] please fail")
    until(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".turn-end")) == 2)
    report["failure_count"] = driver.execute_script(
        "return document.querySelector('#events').textContent.split(arguments[0]).length - 1;", "XYZ-123")
    report["failure_end"] = text_of(driver, ".turn-end")[-1]

    report["stage"] = "beta: two calls wait at once"
    results = {}

    def call(call_id, path):
        try:
            results[call_id] = post(url, f"/api/sessions/beta/tools/file_manager__write?call_id={call_id}&mode=auto",
                                    {"path": path, "content": call_id})
        except Exception as e:  # noqa: BLE001 -- reported, checked by the Rust side
            results[call_id] = {"error": str(e)}

    long_path = "queue/" + "a-rather-long-folder-name-" * 6 + "/first.txt"
    threads = [threading.Thread(target=call, args=("q1", long_path), daemon=True)]
    threads[0].start()
    until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, '.approval[data-call-id="q1"]'))
    threads.append(threading.Thread(target=call, args=("q2", "queue/second.txt"), daemon=True))
    threads[1].start()
    until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, '.approval[data-call-id="q2"]'))
    until(driver, lambda d: d.title.startswith("(3)"))
    report["title_three"] = driver.title
    report["q1_live"] = live_buttons(card(driver, "q1"))
    report["q2_live"] = live_buttons(card(driver, "q2"))
    report["q2_note"] = card(driver, "q2").find_element(By.CSS_SELECTOR, ".queue-note").text
    report["active_before"] = active_cards(driver)
    report["beta_row"] = row_text(driver, "beta")

    report["stage"] = "the page at 420 px (beta)"
    no_sideways_scroll(driver, shots, report, "narrow_beta", "narrow-beta.png")

    report["stage"] = "beta: answer the first, then the second"
    card(driver, "q1").find_element(By.CSS_SELECTOR, 'button[data-decision="approve"]').click()
    until(driver, lambda d: "answered" in card(d, "q1").get_attribute("class"))
    until(driver, lambda d: live_buttons(card(d, "q2")))
    report["q2_live_after"] = live_buttons(card(driver, "q2"))
    report["q2_note_after"] = card(driver, "q2").find_element(By.CSS_SELECTOR, ".queue-note").is_displayed()
    report["active_after"] = active_cards(driver)
    card(driver, "q2").find_element(By.CSS_SELECTOR, 'button[data-decision="deny"]').click()
    for thread in threads:
        thread.join(WAIT)
    report["queue_results"] = {k: v.get("status", v.get("error")) for k, v in results.items()}

    report["stage"] = "a turn started elsewhere appears in the list"
    post(url, "/api/sessions/gamma/turns", {"message": "[md]   from\nelsewhere"})
    until(driver, lambda d: "from elsewhere" in row_text(d, "gamma"))
    report["gamma_row"] = row_text(driver, "gamma")

    report["stage"] = "alpha: approve, then the time and the wait"
    session_row(driver, "alpha").click()
    until(driver, lambda d: d.find_element(By.CSS_SELECTOR, "#stream-state").text == "live")
    alpha_id = report["alpha_call_id"]
    until(driver, lambda d: live_buttons(card(d, alpha_id)))
    report["stage"] = "the page at 420 px (alpha)"
    no_sideways_scroll(driver, shots, report, "narrow_alpha", "narrow-alpha.png")
    card(driver, alpha_id).find_element(By.CSS_SELECTOR, 'button[data-decision="approve"]').click()
    report["stage"] = "alpha: the call's result"
    finished_call(driver, alpha_id)
    report["alpha_elapsed"] = driver.find_element(By.CSS_SELECTOR, f'.call[data-call-id="{alpha_id}"] .elapsed').text
    report["alpha_args_hidden"] = not driver.find_element(
        By.CSS_SELECTOR, f'.call[data-call-id="{alpha_id}"] > pre.args').is_displayed()
    until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".turn-end"))
    until(driver, lambda d: d.title == TITLE)
    report["title_after"] = driver.title
    until(driver, lambda d: "waiting" not in row_text(d, "alpha"))
    report["alpha_row_after"] = row_text(driver, "alpha")

    report["stage"] = "the renderers"
    report["renderers"] = driver.execute_script(RENDERERS)
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
    report["stage"] = "drop a file on the log (upload with the token)"
    driver.execute_script(
        """
        const dt = new DataTransfer();
        dt.items.add(new File(['question,answer\\n"2+2?",4\\n'], 'dropped.csv', {type: 'text/csv'}));
        const target = document.querySelector('#view-live');
        target.dispatchEvent(new DragEvent('dragover', {dataTransfer: dt, bubbles: true, cancelable: true}));
        target.dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));
        """
    )
    until(driver, lambda d: "Uploaded input/dropped.csv" in d.find_element(By.CSS_SELECTOR, "#inputs").text)
    report["dropped_text"] = driver.find_element(By.CSS_SELECTOR, "#inputs").text
    report["stage"] = "choose a file with the Add files button"
    chosen = os.path.join(shots, "chosen notes.txt")
    with open(chosen, "w", encoding="utf-8") as f:
        f.write("chosen in the browser\n")
    field = driver.find_element(By.CSS_SELECTOR, "#upload-input")
    # The input sits inside its label; the person clicks the label. Selenium types the path.
    driver.execute_script("arguments[0].hidden = false", field)
    field.send_keys(chosen)
    until(driver, lambda d: "Uploaded input/chosen notes.txt" in d.find_element(By.CSS_SELECTOR, "#inputs").text)
    report["chosen_text"] = driver.find_element(By.CSS_SELECTOR, "#inputs").text
    report["upload_error"] = driver.find_element(By.CSS_SELECTOR, "#upload-error").text
    driver.save_screenshot(os.path.join(shots, "upload.png"))
    report["stage"] = "done"


def progress(driver, url, shots, report):
    report["stage"] = "open the console"
    driver.get(url)
    report["stage"] = "open a session"
    open_session(driver, "progress-test")
    report["stage"] = "send a message"
    send(driver, "Please validate rows.jsonl")
    report["stage"] = "wait for the call's progress"
    bar = f'.call[data-call-id="v1"] .progress'
    visible(driver, bar)
    report["stage"] = "wait for the call's result"
    report["tool_status"], report["tool_result"] = finished_call(driver, "v1")
    report["stage"] = "read the card's last progress report"
    until(driver, lambda d: "(100%)" in d.find_element(By.CSS_SELECTOR, bar + " .progress-text").text)
    node = driver.find_element(By.CSS_SELECTOR, bar)
    report["progress_visible"] = node.is_displayed()
    report["progress_text"] = driver.find_element(By.CSS_SELECTOR, bar + " .progress-text").text
    meter = driver.find_element(By.CSS_SELECTOR, bar + " progress")
    report["bar_visible"] = meter.is_displayed()
    report["bar_value"] = driver.execute_script("return arguments[0].value", meter)
    report["bar_max"] = driver.execute_script("return arguments[0].max", meter)
    driver.save_screenshot(os.path.join(shots, "progress.png"))
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
        elif mode == "review":
            review(driver, url, shots, report)
        elif mode == "layout":
            layout(driver, url, shots, report)
        elif mode == "attention":
            attention(driver, url, shots, report)
        elif mode == "token":
            token(driver, url, shots, sys.argv[4], report)
        elif mode == "progress":
            progress(driver, url, shots, report)
        else:
            raise SystemExit(f"unknown mode {mode}")
        report["ok"] = True
        code = 0
    except TimeoutException:
        report["error"] = f"timed out after {WAIT} s at: {report['stage']}"
    except WebDriverException as e:
        report["error"] = f"webdriver: {e.msg}"
    except Exception as e:  # noqa: BLE001 -- a mistake in this script: say where
        report["error"] = f"{type(e).__name__} at {report['stage']}: {e}"
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
