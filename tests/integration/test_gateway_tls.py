"""The gateway on the owner's certificate, and its watcher, with no vLLM behind it (no engine start; the CLI wants
a run, the library's ``gateway.ops.up`` takes none): with a certificate and key it serves HTTPS only (the admin key
gets 200, no key 401, plain HTTP no answer), a SIGKILLed proxy is started again by the watcher on the same
certificate, and `forklift gateway down` leaves neither process.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import signal
import ssl
import time
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from forklift.gateway import ops
from tests.helpers import forklift, free_port, pid_running

pytestmark = pytest.mark.integration


def _self_signed(folder: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "forklift-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path



def test_tls_only_and_a_killed_proxy_comes_back(tmp_path: Path) -> None:
    home = Path(os.environ["FORKLIFT_HOME"])  # tests/conftest.py's own home for this test; the watcher inherits it
    cert, key = _self_signed(tmp_path)
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    trust = ssl.create_default_context(cafile=str(cert))
    assert ops.up([], port=port, cert=str(cert), key=str(key), timeout_s=600).url == url
    state_file = home / "gateway" / "state.json"
    admin = (home / "gateway" / "admin.key").read_text().strip()
    try:
        ok = httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {admin}"}, verify=trust, timeout=30)
        assert ok.status_code == 200, ok.text
        assert httpx.get(f"{url}/v1/models", verify=trust, timeout=30).status_code == 401
        with pytest.raises(httpx.HTTPError):  # a TLS socket does not answer plain HTTP
            httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10)

        first = json.loads(state_file.read_text())["proxy_pid"]
        os.killpg(first, signal.SIGKILL)
        deadline, again = time.monotonic() + 300, 0
        while time.monotonic() < deadline:
            pid = json.loads(state_file.read_text()).get("proxy_pid")
            if pid != first:
                try:
                    again = httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {admin}"},
                                      verify=trust, timeout=10).status_code
                except httpx.HTTPError:
                    again = 0
                if again == 200:
                    break
            time.sleep(1)
        assert again == 200, f"the watcher did not bring the proxy back: {json.loads(state_file.read_text())}"
        assert json.loads(state_file.read_text())["restarts"], "the restart was not recorded"
    finally:
        down = forklift("gateway", "down", "--json", home=home, timeout=120)
    assert down.returncode == 0, down.stderr
    state = json.loads(state_file.read_text())
    assert state["stopped"] and not pid_running(state["watcher_pid"]) and not pid_running(state["proxy_pid"])
