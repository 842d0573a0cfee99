"""A mosquitto run with docs/MQTT.md's credentials, ACL and TLS blocks, on loopback.

The two blocks are read from the document (paths and the port replaced), so the
configuration users copy is the one the tests run. The CA and the server certificate are
generated per test with ``cryptography`` (throwaway, valid for 1 day).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.mqtt.conftest import Broker

DOC = Path(__file__).parents[2] / "docs" / "MQTT.md"
MOSQUITTO_PASSWD = shutil.which("mosquitto_passwd") or "/usr/bin/mosquitto_passwd"
SECTION = "## Credentials, ACL and TLS (tested)"

# user -> password; the agents' user names are their agent ids.
USERS = {
    "memwarden": "daemon-secret",
    "edge1": "edge1-secret",
    "edge2": "edge2-secret",
    "edge3": "edge3-secret",
    "plain": "plain-secret",  # not an agent: given events/# by the tests' extra ACL lines
}


def documented_block(lang: str) -> str:
    """The first ```<lang> block of the tested section of docs/MQTT.md."""
    text = DOC.read_text()
    section = text[text.index(SECTION) :]
    match = re.search(rf"```{lang}\n(.*?)```", section, re.DOTALL)
    assert match is not None, f"no {lang} block in {SECTION!r}"
    return match.group(1)


@dataclass(frozen=True)
class Certs:
    ca: Path
    cert: Path
    key: Path


def make_certs(directory: Path) -> Certs:
    """A throwaway CA and a server certificate for 127.0.0.1 / localhost signed by it."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "memwarden test CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    certs = Certs(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    certs.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    certs.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    certs.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    certs.key.chmod(0o600)
    return certs


async def make_password_file(path: Path, users: dict[str, str]) -> None:
    """``mosquitto_passwd -b`` for each user, as the document says (hashed, not plain)."""
    first = True
    for user, password in users.items():
        args = [MOSQUITTO_PASSWD, *(["-c"] if first else []), "-b", str(path), user, password]
        proc = await asyncio.create_subprocess_exec(
            *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        _, err = await asyncio.wait_for(proc.communicate(), timeout=15)
        assert proc.returncode == 0, err.decode()
        first = False
    assert "secret" not in await asyncio.to_thread(path.read_text)


@dataclass
class SecuredBroker(Broker):
    """A broker whose whole configuration is the documented listener + our paths."""

    body: str = ""

    @property
    def url(self) -> str:
        return f"mqtts://127.0.0.1:{self.port}"

    def config(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / "mosquitto.conf"
        path.write_text(
            self.body
            + "\nlog_dest stderr\nlog_type all\n"
            # mosquitto drops root privileges to "mosquitto" unless told to stay root
            + ("user root\n" if os.geteuid() == 0 else "")
        )
        return path


async def start_secured_broker(
    directory: Path, *, extra_acl: str = ""
) -> tuple[SecuredBroker, Certs]:
    """The documented listener and ACL, with certificates and passwords made here."""
    certs = make_certs(directory / "certs")
    passwd = directory / "passwd"
    await make_password_file(passwd, USERS)
    acl = directory / "memwarden.acl"
    acl.write_text(documented_block("acl") + extra_acl)
    broker = SecuredBroker(directory / "broker")
    listener = documented_block("conf")
    assert "allow_anonymous false" in listener
    assert "use_username_as_clientid true" in listener
    replaced = (
        listener.replace("listener 8883", f"listener {broker.port} 127.0.0.1")
        .replace("/etc/mosquitto/certs/server.pem", str(certs.cert))
        .replace("/etc/mosquitto/certs/server.key", str(certs.key))
        .replace("/etc/mosquitto/passwd", str(passwd))
        .replace("/etc/mosquitto/memwarden.acl", str(acl))
    )
    assert "/etc/mosquitto" not in replaced
    broker.body = replaced
    broker.start()
    return broker, certs
