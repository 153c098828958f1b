"""``@realtime-dispatch/client`` as an app installs it: built inside a copy of ``clients/js`` alone
(``npm ci``, ``npm pack``, which builds), its tarball installed into a scratch project beside each
supported major of ``@microsoft/signalr`` (one copy of it, the app's), and used there against a
real ``serve``: a connect, a push and a resume (``tests/js/package_smoke.mjs``)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.e2e.test_demo_page import serve

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "js"
SECRET = "a-configured-secret-of-at-least-32-bytes"
# The majors of the official client the package is tested with: its peer dependency's range.
SIGNALR = {"10": "^10.0.11", "11": "^11"}


def npm(cwd: Path, *args: str) -> str:
    if shutil.which("npm") is None:
        pytest.fail("npm is not on PATH: the package tests need Node.js with npm")
    done = subprocess.run(
        ["npm", *args, "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, f"npm {' '.join(args)}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package built and packed in a folder of its own: nothing of the repository around it."""
    folder = tmp_path_factory.mktemp("sdk") / "client"
    folder.mkdir()
    for name in ("package.json", "package-lock.json", "tsconfig.json", "README.md"):
        shutil.copy(PACKAGE / name, folder / name)
    shutil.copytree(PACKAGE / "src", folder / "src")
    npm(folder, "ci")
    out = folder.parent / "packed"
    out.mkdir()
    npm(folder, "pack", "--pack-destination", str(out))  # prepack: npm run build
    (packed,) = out.glob("realtime-dispatch-client-*.tgz")
    return packed


def test_the_tarball_carries_the_build_and_a_peer_signalr(tarball: Path) -> None:
    with tarfile.open(tarball) as archive:
        names = set(archive.getnames())
        manifest = json.load(archive.extractfile("package/package.json"))
    assert {"package/dist/index.js", "package/dist/index.d.ts", "package/README.md"} <= names
    assert not any("node_modules" in name for name in names)
    assert manifest["peerDependencies"] == {"@microsoft/signalr": " || ".join(SIGNALR.values())}
    assert "@microsoft/signalr" not in manifest.get("dependencies", {})


@pytest.mark.timeout(420)
@pytest.mark.parametrize("major", sorted(SIGNALR))
async def test_the_installed_package_connects_receives_and_resumes(
    major: str, tarball: Path, database_url: str, tmp_path: Path
) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "package.json").write_text(
        json.dumps(
            {
                "name": "scratch-app",
                "private": True,
                "type": "module",
                "dependencies": {
                    "@microsoft/signalr": SIGNALR[major],
                    "@realtime-dispatch/client": f"file:{tarball}",
                },
            }
        )
    )
    npm(app, "install")
    modules = app / "node_modules"
    signalr = json.loads((modules / "@microsoft/signalr/package.json").read_text())
    assert signalr["version"].split(".")[0] == major
    # one copy: the SDK's import resolves to the app's @microsoft/signalr
    assert not (modules / "@realtime-dispatch/client/node_modules").exists()
    shutil.copy(ROOT / "tests" / "js" / "package_smoke.mjs", app / "smoke.mjs")
    async with serve(database_url, tmp_path / "data", REALTIME_HUB_JWT_SECRET=SECRET) as url:
        proc = await asyncio.create_subprocess_exec(
            "node",
            "smoke.mjs",
            cwd=app,
            env={
                "PATH": "/usr/bin:/bin:/usr/local/bin",
                "SDK_TEST_URL": url,
                "SDK_TEST_JWT_SECRET": SECRET,
            },
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, (out + err).decode(errors="replace")[-3000:]
    seen = json.loads(out.decode().strip().splitlines()[-1])
    assert seen["signalr"].split(".")[0] == major
    assert seen["pushed"][0] == "pushed"
    assert seen["timeline"] == ["pushed", "missed"]
    assert seen["resumes"] >= 1
    assert seen["missed"] >= 1  # "missed" came from GET /api/sync on the resume
    assert seen["recovered"] == 0
