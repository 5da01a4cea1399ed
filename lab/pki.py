"""Certificates, service-account keys and kubeconfigs for the lab control plane.

Generated once under .lab/pki (git-ignored); everything is bound to 127.0.0.1.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from lab.components import HOST, KUBECONFIG, LAB, PKI, PORTS

VALIDITY = dt.timedelta(days=365)

# client identity per kubeconfig: (file, common name, organisation)
CLIENTS = {
    "admin": (KUBECONFIG, "lab-admin", "system:masters"),
    "kube-scheduler": (LAB / "kube-scheduler.kubeconfig", "system:kube-scheduler", None),
    "kube-controller-manager": (
        LAB / "kube-controller-manager.kubeconfig",
        "system:kube-controller-manager",
        None,
    ),
}


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write_key(key: rsa.RSAPrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _sign(subject, public_key, issuer, issuer_key, *, ca=False, server_sans=None, client=False):
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        # the key identifiers: Python 3.13's ssl verifies strictly (VERIFY_X509_STRICT) and refuses a chain without them
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
        )
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(True, False, True, False, False, True, True, False, False), critical=True
        )
    else:
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH] if client else [ExtendedKeyUsageOID.SERVER_AUTH]
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if server_sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(server_sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _has_key_ids(path: Path) -> bool:
    """Whether the certificate at ``path`` carries its key identifiers (a lab made before they were added has
    none: its certificates are made again)."""
    try:
        x509.load_pem_x509_certificate(path.read_bytes()).extensions.get_extension_for_class(
            x509.SubjectKeyIdentifier
        )
    except (x509.ExtensionNotFound, ValueError):
        return False
    return True


def ensure() -> bool:
    """Create whatever is missing. Returns True when anything was generated."""
    PKI.mkdir(parents=True, exist_ok=True)
    if (
        (PKI / "ca.crt").exists()
        and _has_key_ids(PKI / "ca.crt")
        and all(path.exists() for path, _, _ in CLIENTS.values())
    ):
        return False
    ca_key = _key()
    ca_name = _name("gpusplit-lab-ca")
    ca = _sign(ca_name, ca_key.public_key(), ca_name, ca_key, ca=True)
    _write_key(ca_key, PKI / "ca.key")
    (PKI / "ca.crt").write_bytes(_pem(ca))

    sans = [
        x509.IPAddress(ipaddress.ip_address(HOST)),
        x509.IPAddress(ipaddress.ip_address("10.96.0.1")),
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"),
        x509.DNSName("kubernetes.default.svc.cluster.local"),
    ]
    api_key = _key()
    api = _sign(_name("kube-apiserver"), api_key.public_key(), ca_name, ca_key, server_sans=sans)
    _write_key(api_key, PKI / "apiserver.key")
    (PKI / "apiserver.crt").write_bytes(_pem(api))

    sa_key = _key()
    _write_key(sa_key, PKI / "sa.key")
    (PKI / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )

    server = f"https://{HOST}:{PORTS['kube-apiserver']}"
    for user, (path, cn, org) in CLIENTS.items():
        key = _key()
        cert = _sign(_name(cn, org), key.public_key(), ca_name, ca_key, client=True)
        _write_kubeconfig(path, server, _pem(ca), _pem(cert), key, user)
    return True


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _write_kubeconfig(path: Path, server: str, ca_pem: bytes, cert_pem: bytes, key, user: str) -> None:
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "gpusplit-lab",
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate-data": _b64(cert_pem), "client-key-data": _b64(key_pem)},
            }
        ],
        "contexts": [{"name": "gpusplit-lab", "context": {"cluster": "gpusplit-lab", "user": user}}],
        "current-context": "gpusplit-lab",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
