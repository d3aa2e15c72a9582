"""Where the monitor is and how to prove who we are: endpoint, token, TLS.

Arguments win over the environment: ``WARDEN_ENDPOINT`` (default
``http://127.0.0.1:50051``; several replicas separated by commas, tried in
turn when one is down), ``WARDEN_TOKEN`` or ``WARDEN_TOKEN_FILE``,
``WARDEN_CA_CERT``, ``WARDEN_CLIENT_CERT`` and ``WARDEN_CLIENT_KEY`` (the
names ``wardenctl`` reads).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

import grpc
import grpc.aio

from ._errors import ConfigurationError

DEFAULT_ENDPOINT = "http://127.0.0.1:50051"
PathLike = Union[str, "os.PathLike[str]"]

# A restarted monitor is found again within a second, not after grpc's
# default reconnect backoff (up to two minutes).
_CHANNEL_OPTIONS: list[tuple[str, int | str]] = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.enable_retries", 0),
]


@dataclass(frozen=True)
class Replica:
    """One endpoint of the list, as grpc names its target."""

    endpoint: str
    target: str
    secure: bool

    def options(self) -> list[tuple[str, int | str]]:
        options: list[tuple[str, int | str]] = list(_CHANNEL_OPTIONS)
        if self.target.startswith("unix:"):
            # grpc's default :authority for a socket is its percent-encoded
            # path, which the monitor's HTTP/2 server rejects as malformed.
            options.append(("grpc.default_authority", "localhost"))
        return options


@dataclass(frozen=True)
class Settings:
    """A resolved connection: the endpoint as given, a replica per endpoint
    of its list (in order), the credentials, and the bearer metadata sent
    with every call."""

    endpoint: str
    replicas: tuple[Replica, ...]
    # Never in a repr: the metadata holds the bearer token.
    credentials: grpc.ChannelCredentials | None = field(repr=False)
    metadata: tuple[tuple[str, str], ...] = field(repr=False)

    def channels(self) -> list[grpc.Channel]:
        """A channel per replica, in order (each connects at its first call)."""
        made = []
        for replica in self.replicas:
            if replica.secure and self.credentials is not None:
                made.append(grpc.secure_channel(replica.target, self.credentials, options=replica.options()))
            else:
                made.append(grpc.insecure_channel(replica.target, options=replica.options()))
        return made

    def aio_channels(self) -> list[grpc.aio.Channel]:
        """The same for asyncio, in the running loop."""
        made = []
        for replica in self.replicas:
            if replica.secure and self.credentials is not None:
                made.append(grpc.aio.secure_channel(replica.target, self.credentials, options=replica.options()))
            else:
                made.append(grpc.aio.insecure_channel(replica.target, options=replica.options()))
        return made


def endpoint_list(text: str) -> list[str]:
    """The endpoints of ``text``: one, or several replicas separated by
    commas, each trimmed. An empty entry is refused, named by its place."""
    entries = [entry.strip() for entry in text.split(",")]
    if entries == [""]:
        raise ConfigurationError("endpoint: it is empty")
    for place, entry in enumerate(entries, 1):
        if not entry:
            raise ConfigurationError(
                f"endpoint list `{text}`: entry {place} of {len(entries)} is empty "
                "(separate endpoints with single commas)"
            )
    return entries


def _replica(endpoint: str, tls_files: bool) -> Replica:
    """One endpoint, checked: ``http://HOST:PORT``, ``https://HOST:PORT`` or
    ``unix:/PATH``; TLS files only with https://."""
    if endpoint.startswith("unix:"):
        path = endpoint[len("unix:") :].removeprefix("//")
        if not path.startswith("/"):
            raise ConfigurationError(f"endpoint `{endpoint}`: a Unix socket endpoint is unix:/absolute/path")
        if tls_files:
            raise ConfigurationError(f"endpoint `{endpoint}`: TLS is for https:// endpoints, not Unix sockets")
        return Replica(endpoint, f"unix:{path}", False)
    for scheme, secure in (("http://", False), ("https://", True)):
        if endpoint.startswith(scheme):
            authority = endpoint[len(scheme) :].rstrip("/")
            break
    else:
        raise ConfigurationError(f"endpoint `{endpoint}`: expected http://HOST:PORT, https://HOST:PORT or unix:/PATH")
    if not authority or "/" in authority:
        raise ConfigurationError(f"endpoint `{endpoint}`: expected http://HOST:PORT, https://HOST:PORT or unix:/PATH")
    if ":" not in authority.rsplit("]", 1)[-1]:
        authority += ":443" if secure else ":80"
    if not secure and tls_files:
        raise ConfigurationError(f"endpoint `{endpoint}`: TLS files given for a plaintext http:// endpoint")
    return Replica(endpoint, authority, secure)


def _read(what: str, path: PathLike) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise ConfigurationError(f"{what} `{os.fspath(path)}`: {e.strerror or e}") from None


def _read_token_file(path: PathLike) -> bytes:
    """The token file's bytes, refusing a file anyone but its owner may read
    or write (as ssh refuses such a private key: a token is a password). The
    mode is that of the file read, not of a name looked up again."""
    try:
        with open(path, "rb") as file:
            mode = os.fstat(file.fileno()).st_mode & 0o7777
            if mode & 0o077:
                raise ConfigurationError(
                    f"token_file `{os.fspath(path)}`: may be read or written by others (mode {mode:04o}): "
                    "chmod 600 it, a token is a password"
                )
            return file.read()
    except OSError as e:
        raise ConfigurationError(f"token_file `{os.fspath(path)}`: {e.strerror or e}") from None


def _env_path(value: PathLike | None, name: str) -> PathLike | None:
    if value is not None:
        return value
    return os.environ.get(name) or None


def resolve(
    endpoint: str | None,
    token: str | None,
    token_file: PathLike | None,
    ca_cert: PathLike | None,
    client_cert: PathLike | None,
    client_key: PathLike | None,
) -> Settings:
    """The settings from arguments, then the environment. Raises
    :class:`ConfigurationError` naming what is wrong."""
    endpoint = endpoint or os.environ.get("WARDEN_ENDPOINT") or DEFAULT_ENDPOINT
    ca_cert = _env_path(ca_cert, "WARDEN_CA_CERT")
    client_cert = _env_path(client_cert, "WARDEN_CLIENT_CERT")
    client_key = _env_path(client_key, "WARDEN_CLIENT_KEY")
    if (client_cert is None) != (client_key is None):
        raise ConfigurationError("client_cert and client_key: give both for mutual TLS, or neither")

    # The token: an argument, then WARDEN_TOKEN, then WARDEN_TOKEN_FILE. Over
    # mutual TLS the client certificate may be the credential by itself.
    if token is None and token_file is None:
        token = os.environ.get("WARDEN_TOKEN") or None
        if token is None:
            token_file = os.environ.get("WARDEN_TOKEN_FILE") or None
    if token is None and token_file is not None:
        token = _read_token_file(token_file).decode("utf-8", "replace")
    metadata: tuple[tuple[str, str], ...] = ()
    if token is not None:
        token = token.strip()
        if not token:
            raise ConfigurationError("token: it is empty")
        if not all(0x21 <= ord(c) <= 0x7E for c in token):
            raise ConfigurationError("token: it has characters that cannot be sent")
        metadata = (("authorization", f"Bearer {token}"),)
    elif client_cert is None:
        raise ConfigurationError("token: pass token= or token_file=, or set WARDEN_TOKEN or WARDEN_TOKEN_FILE")

    tls_files = bool(ca_cert or client_cert)
    replicas = tuple(_replica(entry, tls_files) for entry in endpoint_list(endpoint))
    credentials = None
    if any(replica.secure for replica in replicas):
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read("ca_cert", ca_cert) if ca_cert else None,
            private_key=_read("client_key", client_key) if client_key else None,
            certificate_chain=_read("client_cert", client_cert) if client_cert else None,
        )
    return Settings(endpoint, replicas, credentials, metadata)
