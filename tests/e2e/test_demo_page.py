"""The demo page at ``/`` of a real ``serve`` process, in headless Chromium: two browser contexts
as two demo users chat live (a new chat listed at once, send, reply, edit, read receipts), and
the page shows a dropped duplicate, a refetch after a lost push, a file message and a cut
connection resumed — all through the TypeScript SDK's browser bundle. Demo tokens exist only
on development secrets."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Page, async_playwright, expect

from tests.e2e.browser import serve
from tests.e2e.test_ops_page import CHROMIUM, CHROMIUM_ARGS

pytestmark = pytest.mark.e2e

SCREENSHOT_DIR = os.environ.get("REALTIME_TEST_SCREENSHOTS")  # set to keep PNGs of the page


async def sign_in(page: Page, url: str, user: str) -> None:
    await page.goto(url)
    await page.locator(f'#cast button[data-user="{user}"]').click()
    await expect(page.locator("#conn")).to_have_text("live")


async def test_two_users_chat_live_in_the_browser(database_url: str, tmp_path: Path) -> None:
    async with serve(database_url, tmp_path, REALTIME_DEV="true") as url, async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        expect.set_options(timeout=10_000)
        try:
            alice = await (
                await browser.new_context(viewport={"width": 1400, "height": 860})
            ).new_page()
            bob = await (
                await browser.new_context(viewport={"width": 1400, "height": 860})
            ).new_page()
            await sign_in(alice, url, "alice")
            await sign_in(bob, url, "bob")

            # Alice starts a chat with Bob and writes; Bob's page shows it live.
            await alice.locator("#new-chat").click()
            await alice.locator("#chat-title").fill("Lunch plans")
            await alice.locator('#chat-members label[data-user="bob"] input').check()
            await alice.locator("#new-chat-form button[type=submit]").click()
            await expect(alice.locator("#conv-title")).to_have_text("Lunch plans")
            # Bob's page lists the new chat at once, before any message: its creation is
            # pushed (chat_updated, ChatCreated) to the members.
            await expect(bob.locator("#chat-list li .title")).to_have_text(["Lunch plans"])
            await expect(bob.locator("#chat-list li .preview")).to_have_text(["no messages yet"])
            await expect(bob.locator("#log")).to_contain_text("chat_updated: ChatCreated")
            await alice.locator("#body").fill("Hi Bob, noodles at noon?")
            await alice.locator("#body").press("Enter")
            await expect(bob.locator("#messages .body")).to_have_text(["Hi Bob, noodles at noon?"])
            await expect(bob.locator("#conv-title")).to_have_text("Lunch plans")

            # Bob answers; Alice sees him typing, online (they share a chat now), his answer,
            # and his read receipt on her message.
            await bob.locator("#body").fill("Yes! See you there")
            await expect(alice.locator("#typing")).to_have_text("Bob is typing…")
            await expect(alice.locator("#chat-list .avatar .dot.on")).to_have_count(1)
            await bob.locator("#body").press("Enter")
            await expect(alice.locator("#messages .body")).to_have_text(
                ["Hi Bob, noodles at noon?", "Yes! See you there"]
            )
            await expect(alice.locator("#messages .mine .receipt")).to_have_text("✓✓ read by Bob")

            # Alice edits her message within the window; Bob sees the new text.
            alice.once(
                "dialog",
                lambda dialog: asyncio.ensure_future(dialog.accept("Hi Bob, ramen at noon?")),
            )
            await alice.locator("#messages .mine button.edit").click()
            await expect(bob.locator('#messages li[data-seq="1"] .body')).to_have_text(
                "Hi Bob, ramen at noon?"
            )
            await expect(bob.locator('#messages li[data-seq="1"] .edited')).to_have_text("edited")

            # The last push delivered twice: dropped, still one copy on the page.
            await bob.locator("#fault-replay").click()
            await expect(bob.locator("#count-dupes")).to_have_text("1")
            await expect(bob.locator("#log")).to_contain_text("dropped")
            await expect(bob.locator("#messages li")).to_have_count(2)

            # A lost push shows up as a gap at the next one, and REST fills it.
            await bob.locator("#fault-drop").click()
            for text in ("Shall I book?", "Booked for two"):
                await alice.locator("#body").fill(text)
                await alice.locator("#body").press("Enter")
                await expect(alice.locator("#messages .body").last).to_have_text(text)
            await expect(bob.locator("#messages .body")).to_have_text(
                ["Hi Bob, ramen at noon?", "Yes! See you there", "Shall I book?", "Booked for two"]
            )
            await expect(bob.locator("#log")).to_contain_text("gap filled over REST: 1 missed")

            # A file message (name and size only): Bob's page shows it as a file.
            await alice.locator("#file").set_input_files(
                {"name": "menu.pdf", "mimeType": "application/pdf", "buffer": b"x" * 2048}
            )
            await expect(bob.locator("#messages .body.kind-file")).to_have_text(
                "📎 menu.pdf (2.0 KB)"
            )

            # Cut the connection (down for 3 s): what Alice sends meanwhile is missed live;
            # the SDK reconnects and resumes from its sync cursor, no REST resync.
            await bob.locator("#fault-cut").click()
            await expect(bob.locator("#conn")).to_have_text("reconnecting…")
            await alice.locator("#body").fill("While you were away")
            await alice.locator("#body").press("Enter")
            await expect(alice.locator("#messages .body").last).to_have_text("While you were away")
            await expect(bob.locator("#log")).to_contain_text(
                re.compile(r"resumed: [1-9]\d* missed events?")
            )
            await expect(bob.locator("#conn")).to_have_text("live")
            await expect(bob.locator("#messages .body").last).to_have_text("While you were away")
            await alice.locator("#body").fill("Still there?")
            await alice.locator("#body").press("Enter")
            await expect(bob.locator("#messages .body").last).to_have_text("Still there?")
            if SCREENSHOT_DIR:
                await alice.screenshot(path=f"{SCREENSHOT_DIR}/demo-alice.png")
                await bob.screenshot(path=f"{SCREENSHOT_DIR}/demo-bob.png")
        finally:
            await browser.close()


async def test_demo_tokens_exist_only_on_development_secrets(
    database_url: str, tmp_path: Path
) -> None:
    configured = {"REALTIME_HUB_JWT_SECRET": "a-configured-secret-of-at-least-32-bytes"}
    async with (
        serve(database_url, tmp_path / "prod", **configured) as url,
        httpx.AsyncClient(base_url=url) as http,
    ):
        assert (await http.get("/")).status_code == 200  # the page, for a pasted token
        assert (await http.post("/demo/api/token", json={"user": "alice"})).status_code == 404
        assert (await http.get("/demo/api/users")).json()["devTokens"] is False
    async with (
        serve(database_url, tmp_path / "dev", REALTIME_DEV="true") as url,
        httpx.AsyncClient(base_url=url) as http,
    ):
        minted = await http.post("/demo/api/token", json={"user": "bob"})
        assert minted.status_code == 200
        # JSON only (a cross-site form posts text/plain), and only under this server's address
        # (a DNS-rebinding page reaches it under the attacker's host name).
        form = await http.post(
            "/demo/api/token", content=b'{"user": "bob"}', headers={"Content-Type": "text/plain"}
        )
        assert form.status_code == 415
        rebound = await http.post(
            "/demo/api/token", json={"user": "bob"}, headers={"Host": "attacker.example:80"}
        )
        assert rebound.status_code == 403
        assert "token" not in rebound.json()
        token = minted.json()["token"]
        chats = await http.get("/demo/api/chats", headers={"Authorization": f"Bearer {token}"})
        assert chats.json() == {"items": []}
        assert (await http.post("/demo/api/token", json={"user": "mallory"})).status_code == 422
        assert (await http.get("/demo/api/chats")).status_code == 401
