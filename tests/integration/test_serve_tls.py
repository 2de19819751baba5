"""``tide serve --tls-cert/--tls-key``: HTTPS with the service's own certificate, and a CLI that trusts it.

A CA and a server certificate for 127.0.0.1 are made by the test with the ``openssl`` command. The service
answers HTTPS only; the CLI reaches it with the CA from ``TIDE_CA_BUNDLE`` or from ``tide login --ca``, and
without it says the certificate is not trusted (exit 4, no traceback). A certificate without its key, a key
that does not match, a file that is not there: exit 2 with the reason, before serving.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from servicekit import free_port, serve_process, wait_for
from typer.testing import CliRunner

from api.client.cli.main import app

ROOT = Path(__file__).resolve().parents[2]


def openssl(*args: str, cwd: Path) -> None:
    found = shutil.which("openssl")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("the openssl command is not installed: it makes the test's certificates")
        pytest.skip("the openssl command is not installed")
    subprocess.run([found, *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ca.pem (a CA), server.pem/server.key (127.0.0.1, signed by it) and other.key (another key)."""
    d = tmp_path_factory.mktemp("certs")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=Tide test CA", cwd=d)  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=127.0.0.1", cwd=d)  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "2", "-extfile", "san.ext", cwd=d)  # fmt: skip
    openssl("genrsa", "-out", "other.key", "2048", cwd=d)
    return d


def cli(args: list[str], home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("TIDE_", "XDG_"))}
    kept |= {"XDG_CONFIG_HOME": str(home / "config"), "XDG_DATA_HOME": str(home / "data"), **env}
    return subprocess.run(
        [sys.executable, "-m", "api.client.cli.main", *args],
        env=kept,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )


def test_serve_speaks_https_and_the_cli_trusts_the_ca_it_is_given(tmp_path: Path, certs: Path) -> None:
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    flags = ("--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server.key"))
    process = serve_process(tmp_path / "data", port, *flags, capture=True)
    ca = str(certs / "ca.pem")

    def answers() -> bool:
        try:
            return httpx.get(f"{url}/healthz", timeout=1, verify=ca_context).status_code == 200
        except httpx.TransportError:
            return False

    ca_context = ssl.create_default_context(cafile=ca)
    try:
        wait_for(answers, timeout=30, what="tide serve to answer over HTTPS")
        with pytest.raises(httpx.TransportError):  # plain HTTP is not served
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
        server = json.loads((tmp_path / "data" / "server.json").read_text())
        assert server["url"] == f"https://127.0.0.1:{port}"
        token = (tmp_path / "data" / "admin-token").read_text().strip()

        # no CA: the certificate is not trusted, said in one line, exit 4
        refused = cli(["project", "list", "--url", url, "--token", token], tmp_path / "u0")
        assert refused.returncode == 4, refused.stderr
        assert "CERTIFICATE_VERIFY_FAILED" in refused.stderr and "Traceback" not in refused.stderr

        # TIDE_CA_BUNDLE
        made = cli(["project", "create", "team-a", "--deserved", "2", "--url", url, "--token", token],
                   tmp_path / "u1", TIDE_CA_BUNDLE=ca)  # fmt: skip
        assert made.returncode == 0, made.stderr

        # tide login --ca: saved, used by later commands
        login = cli(["login", url, "--token", token, "--ca", ca], tmp_path / "u2")
        assert login.returncode == 0, login.stderr
        listed = cli(["project", "list"], tmp_path / "u2")
        assert listed.returncode == 0 and "team-a" in listed.stdout, listed.stderr

        missing = cli(["project", "list", "--url", url, "--token", token], tmp_path / "u3",
                      TIDE_CA_BUNDLE=str(tmp_path / "nowhere.pem"))  # fmt: skip
        assert missing.returncode == 2 and "cannot load the CA bundle" in missing.stderr, missing.stderr
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=20)
    assert f"Tide API:      {url}/api/v1" in output, output


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--tls-cert", "{d}/server.pem"], "give both --tls-cert and --tls-key"),
        (["--tls-key", "{d}/server.key"], "give both --tls-cert and --tls-key"),
        (["--tls-cert", "{d}/server.pem", "--tls-key", "{d}/nowhere.key"], "is not a file"),
        (["--tls-cert", "{d}/server.pem", "--tls-key", "{d}/other.key"], "cannot load the certificate"),
    ],
)
def test_serve_refuses_a_certificate_it_cannot_use(
    tmp_path: Path, certs: Path, flags: list[str], said: str
) -> None:
    args = ["serve", "--data-dir", str(tmp_path), *(f.format(d=certs) for f in flags)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert said in result.output
