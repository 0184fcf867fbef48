"""rediss:// (TLS) against a real redis-server with TLS, and a real worker over TLS."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterator, List

import pytest
import redis

import wasmgear
from conftest import Worker, end, free_port, spawn, wait_until


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


class TlsRedis:
    """A redis-server that speaks TLS only, with a certificate for 127.0.0.1 signed by a CA
    made here (`ca.pem`)."""

    def __init__(self, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                "/CN=wasmgear test CA", "-keyout", "ca.key", "-out", "ca.pem", cwd=workdir)
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
                "-keyout", "server.key", "-out", "server.csr", cwd=workdir)
        (workdir / "ext.cnf").write_text(
            "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\n"
            "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
        )
        openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-extfile", "ext.cnf", "-out", "server.pem",
                cwd=workdir)
        self.ca = workdir / "ca.pem"
        self.port = free_port()
        self.url = f"rediss://127.0.0.1:{self.port}"
        self.log = open(workdir / "redis.log", "ab")
        self.process = spawn(
            ["redis-server", "--port", "0", "--tls-port", str(self.port), "--bind", "127.0.0.1",
             "--tls-cert-file", str(workdir / "server.pem"),
             "--tls-key-file", str(workdir / "server.key"),
             "--tls-ca-cert-file", str(self.ca), "--tls-auth-clients", "no",
             "--save", "", "--appendonly", "no", "--dir", str(workdir)],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        self.redis = redis.Redis(host="127.0.0.1", port=self.port, ssl=True, ssl_ca_certs=str(self.ca),
                                 socket_timeout=5)

        def up() -> bool:
            if self.process.poll() is not None:
                raise AssertionError((workdir / "redis.log").read_text())
            try:
                return bool(self.redis.ping())
            except redis.ConnectionError:
                return False

        try:
            wait_until(up, 15, "redis-server (TLS) to answer PING")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        self.redis.close()
        end(self.process)
        self.log.close()


@pytest.fixture
def tls(tmp_path: Path) -> Iterator[TlsRedis]:
    server = TlsRedis(tmp_path / "tls")
    yield server
    server.stop()


def test_rediss_round_trip_with_a_worker(tls: TlsRedis, tmp_path: Path) -> None:
    worker = Worker(tls.url, tmp_path / "worker", plugins=("count",),
                    env={"SSL_CERT_FILE": str(tls.ca)})
    client = wasmgear.Client.from_url(tls.url, ssl_ca_certs=str(tls.ca))
    try:
        reports: List[wasmgear.Progress] = []
        job = client.wait(client.enqueue("count", "3 10").id, timeout=60,
                          on_progress=reports.append)
        assert job.state == "succeeded" and reports[-1].done == 3
        with client.events("count") as stream:
            enqueued = client.enqueue("count", "1 1")
            kinds = set()
            while "finish" not in kinds:
                event = stream.get(timeout=30)
                assert event is not None, "no event over TLS"
                if event.id == enqueued.id:
                    kinds.add(event.kind)
        assert {"create", "start", "finish"} <= kinds
    finally:
        client.close()
        worker.stop()


def test_rediss_refuses_an_unknown_ca(tls: TlsRedis) -> None:
    with pytest.raises(wasmgear.Unreachable) as caught:
        wasmgear.Client.from_url(tls.url)
    assert caught.value.exit_code == 6
    assert "certificate" in str(caught.value).lower()


def test_plain_redis_url_to_a_tls_port_is_unreachable(tls: TlsRedis) -> None:
    with pytest.raises(wasmgear.Unreachable):
        wasmgear.Client.from_url(f"redis://127.0.0.1:{tls.port}", socket_timeout=2)
