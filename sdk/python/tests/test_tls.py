"""TLS and mutual TLS to a real wardend serving them."""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

import warden

ALICE = warden.Actor("alice", "python-harness", "py-tls")
README = warden.read_file("/home/alice/project/README.md")


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write(path: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> tuple[Path, Path]:
    key_path = path.with_suffix(".key")
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path, key_path


def _issue(
    folder: Path, name: str, ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate] | None, *, server: bool = False
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(ca[1].subject if ca else _name(name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if ca is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    elif server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    cert = builder.sign(ca[0] if ca else key, hashes.SHA256())
    _write(folder / f"{name}.pem", key, cert)
    return key, cert


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    ca = _issue(tmp_path, "ca", None)
    _issue(tmp_path, "server", ca, server=True)
    _issue(tmp_path, "client", ca)
    other = _issue(tmp_path, "other-ca", None)
    _issue(tmp_path, "stranger", other)
    return tmp_path


def test_tls_and_mutual_tls(own_wardend, pki: Path) -> None:
    monitor = own_wardend(
        args=[
            "--tls-cert", str(pki / "server.pem"),
            "--tls-key", str(pki / "server.key"),
            "--tls-client-ca", str(pki / "ca.pem"),
        ]
    )  # fmt: skip
    endpoint = f"https://localhost:{monitor.address.rsplit(':', 1)[1]}"
    token = monitor.token("harness")
    mutual = {"ca_cert": pki / "ca.pem", "client_cert": pki / "client.pem", "client_key": pki / "client.key"}
    with warden.Client(endpoint, token, **mutual) as client:
        assert client.check(ALICE, README).allowed
        with pytest.raises(warden.Denied):
            client.check(ALICE, warden.read_file("/etc/shadow"))

    # A client certificate the monitor's client CA did not sign fails the
    # handshake: nothing is decided.
    stranger = {**mutual, "client_cert": pki / "stranger.pem", "client_key": pki / "stranger.key"}
    with warden.Client(endpoint, token, **stranger, timeout=1.0) as client:
        with pytest.raises(warden.Unavailable):
            client.check(ALICE, README)
    # A monitor whose certificate another CA signed is not trusted.
    with warden.Client(endpoint, token, **{**mutual, "ca_cert": pki / "other-ca.pem"}, timeout=1.0) as client:
        with pytest.raises(warden.Unavailable):
            client.check(ALICE, README)
    # Plaintext to a TLS listener gets nowhere either.
    with warden.Client(f"http://{monitor.address}", token, timeout=1.0) as client:
        with pytest.raises(warden.Unavailable):
            client.check(ALICE, README)


def test_a_client_certificate_as_the_only_credential(
    own_wardend, pki: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("WARDEN_TOKEN", "WARDEN_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    der = x509.load_pem_x509_certificate((pki / "client.pem").read_bytes()).public_bytes(serialization.Encoding.DER)
    config = tmp_path / "wardend.toml"
    config.write_text(
        f"""
        [[credentials]]
        name = "cert-harness"
        role = "harness"
        cert_sha256 = "{hashlib.sha256(der).hexdigest()}"
        users = ["alice"]
        """
    )
    monitor = own_wardend(
        args=[
            "--config", str(config),
            "--tls-cert", str(pki / "server.pem"),
            "--tls-key", str(pki / "server.key"),
            "--tls-client-ca", str(pki / "ca.pem"),
        ]
    )  # fmt: skip
    endpoint = f"https://localhost:{monitor.address.rsplit(':', 1)[1]}"
    mutual = {"ca_cert": pki / "ca.pem", "client_cert": pki / "client.pem", "client_key": pki / "client.key"}
    with warden.Client(endpoint, **mutual) as client:
        assert client.check(ALICE, README).allowed
        # The certificate's credential acts for alice only.
        with pytest.raises(warden.Refused) as refused:
            client.check(warden.Actor("bob", "python-harness", "py-tls"), warden.read_file("/home/bob/work/x"))
        assert refused.value.code.name == "PERMISSION_DENIED"
    # Without the certificate there is no credential at all.
    with pytest.raises(warden.ConfigurationError, match="token"):
        warden.Client(endpoint, ca_cert=pki / "ca.pem")


def test_tls_files_from_the_environment(own_wardend, pki: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monitor = own_wardend(args=["--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key")])
    monkeypatch.setenv("WARDEN_ENDPOINT", f"https://localhost:{monitor.address.rsplit(':', 1)[1]}")
    monkeypatch.setenv("WARDEN_TOKEN", monitor.token("harness"))
    monkeypatch.setenv("WARDEN_CA_CERT", str(pki / "ca.pem"))
    monkeypatch.delenv("WARDEN_CLIENT_CERT", raising=False)
    monkeypatch.delenv("WARDEN_CLIENT_KEY", raising=False)

    async def main() -> bool:
        async with warden.AsyncClient() as client:
            return (await client.check(ALICE, README)).allowed

    assert asyncio.run(main())
