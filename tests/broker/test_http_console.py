"""The web console in headless Chromium (Debian's ``chromium`` + ``chromium-driver``, driven by
selenium; one browser for the module): every page loads without console errors, a message found by
key shows its body, the storage view's offsets are the record's, and a reset by time from the
group page makes a live consumer (RocketMQ's C++ client) consume again."""
from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")
webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import (NoSuchElementException, StaleElementReferenceException,  # noqa: E402
                                        TimeoutException)
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from rmqstore import MessageStore  # noqa: E402
from rmqstore.broker import Broker, BrokerConfig  # noqa: E402
from rmqstore.broker.http import HttpOptions  # noqa: E402
from rmqstore.broker.remoting import RequestCode as C  # noqa: E402

from tests import kit

from .conftest import RemotingClient, broker_store_config  # noqa: E402

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="needs Debian's chromium and chromium-driver "
                                                                   "(scripts/setup installs them)")
TOKEN = "console-token"


@pytest.fixture(scope="module")
def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-proxy-server", "--window-size=1280,1000",
                "--disable-dev-shm-usage"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=webdriver.ChromeService(executable_path=DRIVER))
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture
def console(tmp_path):
    st = MessageStore.open(Path(tmp_path) / "store", broker_store_config())
    b = Broker(st, BrokerConfig.from_properties({"brokerName": "broker-a"}), listen="127.0.0.1:0",
               http=HttpOptions("127.0.0.1:0", TOKEN))
    b.start()
    yield b, f"http://{b.http.address}"
    b.stop()
    st.close()


def severe(driver) -> list:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def wait_for(driver, css: str, text: str | None = None, timeout: float = 15):
    """The first element ``css`` finds (once its text holds ``text``)."""
    def ready(d):
        els = d.find_elements(By.CSS_SELECTOR, css)
        return els[0] if els and (text is None or text in els[0].text) else False
    return WebDriverWait(driver, timeout, ignored_exceptions=(StaleElementReferenceException,)).until(
        ready, f"{css} {text or ''}")


def text_of(driver, css: str, expected: str, timeout: float = 15) -> str:
    """The text of ``css`` once it equals ``expected`` (or the last text seen): for an element the
    page re-renders every 2 s."""
    seen = [None]

    def ready(d):
        seen[0] = d.find_element(By.CSS_SELECTOR, css).text
        return seen[0] == expected
    try:
        WebDriverWait(driver, timeout, ignored_exceptions=(StaleElementReferenceException, NoSuchElementException)
                      ).until(ready)
    except TimeoutException:
        pass
    return seen[0]


def test_pages_search_and_storage_view(browser, console, cpp_client):
    b, base = console
    cpp_client("produce", "--namesrv", b.address, "--group", "PG", "--topic", "Shop", "--count", 12, "--quiet")
    b.store.wait_dispatched(10)
    c = RemotingClient(b.address)
    c.json_call(C.HEART_BEAT, None, kit.consumer_heartbeat("c1@1", "CG", "Shop"))
    browser.get(base + "/#/cluster")
    wait_for(browser, "#brokers", "broker-a")
    for page, css, text in (("topics", "#topics", "Shop"), ("topic/Shop", "#queues", None),
                            ("groups", "#groups", "CG"), ("group/CG", "#groupLag", None),
                            ("health", "#segments", "00000000000000000000"), ("search", "#searchForm", None)):
        browser.get(f"{base}/#/{page}")
        wait_for(browser, css, text)
    browser.get(base + "/#/search?topic=Shop&key=key-5")
    link = wait_for(browser, "#found a")
    assert "body-5" in browser.find_element(By.CSS_SELECTOR, "#found .body").text
    link.click()
    assert wait_for(browser, "#msgBody").text == "body-5"
    phy = int(browser.current_url.rsplit("/", 1)[1])
    rec = b.store.look_message_by_offset(phy)
    assert rec.properties["KEYS"] == "key-5"
    fields = {e.get_attribute("data-name"): e for e in browser.find_elements(By.CSS_SELECTOR, "#record .field")}
    assert str(rec.phy_offset) in fields["phy_offset"].text and str(rec.store_size) in fields["total"].text
    raw = bytes(b.store.commit_log.get_data(phy, rec.store_size))
    at = int(fields["body"].get_attribute("data-offset"))
    assert raw[at:at + len(rec.body)] == rec.body == b"body-5"
    at = int(fields["queue_offset"].get_attribute("data-offset"))
    assert int.from_bytes(raw[at:at + 8], "big") == rec.queue_offset
    cq = browser.find_element(By.CSS_SELECTOR, "#cqUnit").text
    assert str(rec.phy_offset) in cq and str(rec.queue_offset * 20) in cq
    assert browser.find_elements(By.CSS_SELECTOR, ".item.match")  # the key's chain reaches the record
    browser.get(base + "/#/group/CG")
    wait_for(browser, "#dlqLink").click()  # the group's dead letters: a search by time in %DLQ%CG
    assert wait_for(browser, "#results p").text == "0 found"
    assert severe(browser) == []
    c.close()


def test_reset_by_time_moves_a_live_consumer(browser, console, cpp_client, cpp_client_async, lines_of):
    """A real push consumer (RocketMQ's C++ client) has consumed everything; the group page's reset
    to the beginning makes it consume every message again, without a restart."""
    b, base = console
    cpp_client("produce", "--namesrv", b.address, "--group", "PG", "--topic", "Shop", "--count", 8, "--quiet")
    st = b.store
    st.wait_dispatched(10)
    consumer = cpp_client_async("push", "--namesrv", b.address, "--group", "CG", "--topic", "Shop", "--count", 16,
                                "--timeout", 60)
    ends = {q: st.get_max_offset_in_queue("Shop", q) for q in st.topics()["Shop"]}
    deadline = time.time() + 30  # the client commits its offsets every 5 s
    while time.time() < deadline and any(st.consumer_offsets.query_offset("CG", "Shop", q) != o
                                         for q, o in ends.items()):
        time.sleep(0.2)
    browser.get(base + "/#/group/CG")
    assert text_of(browser, "#groupLag", "0") == "0"
    held = sum(max(0, p - ends[q]) for q, p in st.consumer_offsets.query_pull_offsets("CG", "Shop").items())
    assert held == 0  # everything pulled is committed
    headings = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "#groupBody h3")]
    assert [h for h in headings if h.startswith("Shop (lag 0, 0 in flight, ")], headings
    assert "in flight" in browser.find_element(By.CSS_SELECTOR, "#groupBody table").text
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.CSS_SELECTOR, "#reset input[name=topic]").send_keys("Shop")
    browser.find_element(By.CSS_SELECTOR, "#reset button").click()
    wait_for(browser, "#resetOut", "consumers told: 1")
    got = [x["keys"] for x in lines_of(consumer, timeout=60) if "keys" in x]
    assert sorted(got) == sorted([f"key-{i}" for i in range(8)] * 2)  # each message, then each again
    assert severe(browser) == []
