"""`zkledger collect zk` over TLS against a real ZooKeeper with a TLS client port that requires client certs.

Certificates, keystore and truststore are generated per run (tests/collectors/tls_certs.py). The watched znodes
are readable only by the collector's certificate (an x509 ACL), so rows can only land if the collector came in
over the TLS port with that certificate: the plain port would authenticate nobody.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import ACL, Id, Permissions, make_digest_acl

from lakehouse import Lake
from services.zookeeper import EmbeddedZooKeeper, free_port
from tests.collectors.conftest import rows, wait_for
from tests.collectors.tls_certs import TlsMaterial, make_tls_material

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ADMIN, ADMIN_PW = "kafka-admin", "admin-secret"

Row = tuple[str, str, str, int | None, int]  # source, path, op, version, zxid


class TlsZooKeeper:
    """The server, its plain and TLS ports, and the generated TLS material."""

    def __init__(self, server: EmbeddedZooKeeper, secure_port: int, tls: TlsMaterial) -> None:
        self.server = server
        self.secure_port = secure_port
        self.tls = tls

    @property
    def secure_hosts(self) -> str:
        return f"127.0.0.1:{self.secure_port}"


@pytest.fixture(scope="module")
def tls_zk(tmp_path_factory: pytest.TempPathFactory, starts_zookeeper: None) -> Iterator[TlsZooKeeper]:
    base = tmp_path_factory.mktemp("zk-tls")
    tls = make_tls_material(base / "certs")
    secure_port = free_port()
    server = EmbeddedZooKeeper(base / "data", extra_config=tls.server_config(secure_port, client_auth="need"))
    server.start()
    try:
        yield TlsZooKeeper(server, secure_port, tls)
    finally:
        server.stop()


@pytest.fixture
def admin(tls_zk: TlsZooKeeper) -> Iterator[KazooClient]:
    """The 'Kafka' side: writes over the plain port as a digest user."""
    client = KazooClient(hosts=tls_zk.server.hosts, timeout=15, auth_data=[("digest", f"{ADMIN}:{ADMIN_PW}")])
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


def _acl(tls: TlsMaterial) -> list[ACL]:
    # admin may do everything; the collector's certificate may only read; nobody else (no world ACL)
    return [make_digest_acl(ADMIN, ADMIN_PW, all=True), ACL(Permissions.READ, Id("x509", tls.client_principal))]


def _conf(tmp_path: Path, tls: TlsMaterial, *, ca: Path, verify: bool = True) -> str:
    path = tmp_path / "zkledger.toml"
    path.write_text("\n".join([
        "[zookeeper]",
        "session_timeout_s = 15.0",
        "[zookeeper.tls]",
        "use_ssl = true",
        f"certfile = {json.dumps(str(tls.client_cert))}",
        f"keyfile = {json.dumps(str(tls.client_key))}",
        f"ca = {json.dumps(str(ca))}",
        f"verify = {'true' if verify else 'false'}",
        "[collect]",
        "batch_size = 50",
        "flush_seconds = 0.2",
        "",
    ]))
    return str(path)


def _collect(conf: str, lake: Lake, hosts: str, chroot: str, *extra: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "zkledger.cli", "--conf", conf, "--lake", str(lake.root), "--cluster", lake.cluster,
           "collect", "zk", "--zk", hosts, "--chroot", chroot, *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def _chroot(admin: KazooClient, tls: TlsMaterial) -> str:
    chroot = f"/tls-{uuid.uuid4().hex[:10]}"
    admin.create(chroot, b"", acl=_acl(tls))
    return chroot


def _watch_rows(lake: Lake) -> list[Row]:
    return sorted((r["source"], r["path"], r["op"], r["version"], r["zxid"]) for r in rows(lake))


class Cluster:
    """Kafka-like writes inside one chroot; each returns the row the collector must write for it."""

    def __init__(self, admin: KazooClient, chroot: str, tls: TlsMaterial) -> None:
        self.zk = admin
        self.chroot = chroot
        self.acl = _acl(tls)

    def create(self, path: str, data: bytes, *, ephemeral: bool = False, source: str = "watch") -> Row:
        self.zk.create(self.chroot + path, data, acl=self.acl, ephemeral=ephemeral)
        stat = self.zk.exists(self.chroot + path)
        return (source, path, "CREATE", stat.version, stat.czxid)

    def set(self, path: str, data: bytes) -> Row:
        stat = self.zk.set(self.chroot + path, data)
        return ("watch", path, "SET", stat.version, stat.mzxid)

    def delete(self, path: str) -> Row:
        self.zk.delete(self.chroot + path)
        parent = self.zk.exists(self.chroot + (path.rsplit("/", 1)[0] or ""))
        return ("watch", path, "DELETE", None, parent.pzxid)  # the parent's pzxid is the delete's zxid


def _landed(lake: Lake, row: Row) -> bool:
    return row in _watch_rows(lake)


def test_collect_zk_over_tls_with_client_cert_writes_exact_history(
    tls_zk: TlsZooKeeper, admin: KazooClient, tmp_path: Path
) -> None:
    tls = tls_zk.tls
    lake = Lake(tmp_path / "lake", cluster="tls")
    chroot = _chroot(admin, tls)
    kafka = Cluster(admin, chroot, tls)
    root = admin.exists(chroot)
    expected = [("resync", "/", "CREATE", 0, root.czxid)]
    # before the collector starts: its snapshot sees these
    for path in ("/brokers", "/brokers/ids", "/brokers/topics"):
        expected.append(kafka.create(path, b"", source="resync"))
    expected.append(kafka.create("/controller_epoch", b"1", source="resync"))
    anonymous = KazooClient(hosts=tls_zk.server.hosts, timeout=15)
    anonymous.start(timeout=15)
    try:
        with pytest.raises(NoAuthError):  # the plain port gives no identity that may read the cluster
            anonymous.get(chroot + "/controller_epoch")
    finally:
        anonymous.stop()
        anonymous.close()

    proc = _collect(_conf(tmp_path, tls, ca=tls.ca), lake, tls_zk.secure_hosts, chroot)
    try:
        wait_for(lambda: _landed(lake, expected[-1]) or proc.poll() is not None, limit=60)
        assert proc.poll() is None, proc.communicate()
        # while it watches: one change at a time, each awaited, so none can be coalesced
        steps = [
            lambda: kafka.create("/brokers/ids/1", b'{"version":4,"host":"b1","port":9092}', ephemeral=True),
            lambda: kafka.create("/controller", b'{"version":1,"brokerid":1}', ephemeral=True),
            lambda: kafka.set("/controller_epoch", b"2"),
            lambda: kafka.create("/brokers/topics/t", b'{"version":2,"partitions":{"0":[1]}}'),
            lambda: kafka.create("/brokers/topics/t/partitions", b""),
            lambda: kafka.create("/brokers/topics/t/partitions/0", b""),
            lambda: kafka.create("/brokers/topics/t/partitions/0/state",
                                 b'{"controller_epoch":2,"leader":1,"leader_epoch":0,"isr":[1]}'),
            lambda: kafka.set("/brokers/topics/t/partitions/0/state",
                              b'{"controller_epoch":2,"leader":1,"leader_epoch":1,"isr":[1]}'),
            lambda: kafka.delete("/controller"),
        ]
        for step in steps:
            expected.append(step())
            wait_for(lambda: _landed(lake, expected[-1]) or proc.poll() is not None, limit=30)
            assert proc.poll() is None, proc.communicate()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # flushes and exits cleanly
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert _watch_rows(lake) == sorted(expected)  # exactly these: no extra row, no GAP
    assert out.strip().splitlines()[-1] == f"collect zk: {len(expected)} events written, 0 gaps, 0 quarantined"
    # ZooKeeper authenticated the collector's session by its client certificate, i.e. over the TLS port
    assert f"Authenticated Id '{tls.client_principal}' for scheme 'x509'" in tls_zk.server.log_path.read_text()


def test_wrong_ca_fails_with_a_clear_error_and_writes_nothing(
    tls_zk: TlsZooKeeper, admin: KazooClient, tmp_path: Path
) -> None:
    tls = tls_zk.tls
    lake = Lake(tmp_path / "lake", cluster="tls")
    chroot = _chroot(admin, tls)
    Cluster(admin, chroot, tls).create("/brokers", b"")
    proc = _collect(_conf(tmp_path, tls, ca=tls.wrong_ca), lake, tls_zk.secure_hosts, chroot)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, (out, err)
    lines = err.strip().splitlines()
    # why (kazoo's warning names the failed verification) and then the one-line outcome
    assert any("CERTIFICATE_VERIFY_FAILED" in line for line in lines), err
    assert lines[-1] == (f"error: cannot connect to ZooKeeper at {tls_zk.secure_hosts} over TLS: "
                         "check [zookeeper.tls] ca, certfile and keyfile"), err
    assert "Traceback" not in err
    assert out == ""
    assert rows(lake) == []


def test_verify_false_accepts_a_server_cert_from_an_unknown_ca(
    tls_zk: TlsZooKeeper, admin: KazooClient, tmp_path: Path
) -> None:
    # the `verify` setting reaches kazoo: the same wrong CA is accepted once verification is off
    tls = tls_zk.tls
    lake = Lake(tmp_path / "lake", cluster="tls")
    chroot = _chroot(admin, tls)
    created = Cluster(admin, chroot, tls).create("/brokers", b"", source="resync")
    proc = _collect(_conf(tmp_path, tls, ca=tls.wrong_ca, verify=False), lake, tls_zk.secure_hosts, chroot,
                    "--duration", "2")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert created in _watch_rows(lake)
    assert out.strip().splitlines()[-1].startswith("collect zk: 2 events written, 0 gaps")


def test_plain_client_is_refused_on_the_tls_port(tls_zk: TlsZooKeeper) -> None:
    # the secure port speaks only TLS (so whatever connected there above used TLS)
    plain = KazooClient(hosts=tls_zk.secure_hosts, timeout=5, connection_retry={"max_tries": 2, "delay": 0.1})
    try:
        with pytest.raises(KazooTimeoutError):
            plain.start(timeout=4)
        assert not plain.connected
    finally:
        plain.stop()
        plain.close()
