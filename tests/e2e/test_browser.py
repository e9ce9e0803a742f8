"""The page in a real browser: headless Chromium with a fake microphone speaks a question and hears the answer."""
import os
import re
import time
from pathlib import Path

import pytest

from app.server.app import create_app
from app.settings import Settings
from speech.audio import write_wav
from tests.rtc_helpers import ANSWER, QUESTION_WORDS, front_desk_services, serve_in_thread, spoken_question

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
FAKE_MIC_RATE_HZ = 48_000
# Chromium loops the fake-microphone file: the silence after the question must outlast the test.
TRAILING_SILENCE_S = 40.0
TURN_TIMEOUT_MS = 60_000

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists() and not os.environ.get("CI"),
                       reason="needs Chromium: apt-get install -y chromium"),
]


@pytest.fixture(scope="module")
def server(transcriber, synthesizer):
    services = front_desk_services(transcriber, synthesizer)  # the session's unvaried voice: the same question
    app = create_app(Settings(), services)
    with serve_in_thread(app) as url:
        yield url, services, app
    services.shutdown()


@pytest.fixture(scope="module")
def fake_microphone(server, tmp_path_factory) -> Path:
    _, services, _ = server
    path = tmp_path_factory.mktemp("mic") / "question-48k.wav"
    write_wav(path, spoken_question(services.tts, FAKE_MIC_RATE_HZ, lead_s=1.0, tail_s=TRAILING_SILENCE_S),
              FAKE_MIC_RATE_HZ)
    return path


def chromium_flags(wav: Path) -> list[str]:
    return ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--use-fake-ui-for-media-stream",
            "--use-fake-device-for-media-stream", f"--use-file-for-fake-audio-capture={wav}"]


def test_page_talks_to_parley(server, fake_microphone):
    from playwright.sync_api import expect, sync_playwright

    url, _, app = server
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=chromium_flags(fake_microphone))
        try:
            page = browser.new_page(viewport={"width": 900, "height": 900})
            console = []
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            page.goto(url)
            expect(page.locator("#state")).to_have_text("Not connected")
            page.click("#talk")
            expect(page.locator("#talk")).to_have_text("Hang up")
            user = page.locator(".msg.user.final .text").first
            expect(user).to_have_text(re.compile(".*".join(QUESTION_WORDS), re.I), timeout=TURN_TIMEOUT_MS)
            expect(page.locator(".msg.agent.final .text").first).to_have_text(ANSWER, timeout=TURN_TIMEOUT_MS)
            expect(page.locator(".tool").first).to_contain_text("business_info")
            expect(page.locator(".waterfall .wf-row")).to_have_count(5, timeout=TURN_TIMEOUT_MS)
            expect(page.locator(".waterfall .wf-foot").first).to_contain_text(re.compile(r"End of turn: .* ms of silence"))
            page.wait_for_function("window.parley.remotePeak > 0.02", timeout=TURN_TIMEOUT_MS)
            status = page.evaluate("window.parley")
            page.screenshot(path=str(ARTIFACTS / "browser-turn.png"), full_page=True)
            assert status["state"] == "live" and status["errors"] == [], (status, console)
            page.click("#talk")
            expect(page.locator("#state")).to_have_text("Call ended")
            deadline = time.monotonic() + 10
            while app.state.calls and time.monotonic() < deadline:   # the hangup reached the server
                time.sleep(0.05)
            assert not app.state.calls
        finally:
            browser.close()
    assert (ARTIFACTS / "browser-turn.png").stat().st_size > 10_000
