"""``free_port``: the ports the labs and embedded servers listen on come from outside the kernel's ephemeral
range, where another process's outgoing connection could take them before the server binds."""

from __future__ import annotations

import socket

from services.zookeeper import EPHEMERAL_RANGE, HOST, free_port


def test_free_ports_are_bindable_and_below_the_ephemeral_range() -> None:
    low = int(EPHEMERAL_RANGE.read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(1024 <= p < low for p in ports)
    assert len(ports) > 1  # picked at random, not the same port for every caller
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, port))


def test_a_port_something_listens_on_is_not_handed_out() -> None:
    taken = []
    try:
        for _ in range(200):  # hold many ports of the range: none may come back
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((HOST, free_port()))
            sock.listen()
            taken.append(sock)
        held = {s.getsockname()[1] for s in taken}
        assert len(held) == len(taken)
        assert free_port() not in held
    finally:
        for sock in taken:
            sock.close()


def test_ports_picked_before_any_server_listens_are_all_different() -> None:
    """A Kafka cluster's brokers get their ports before any of them starts: two alike (drawn at random from some
    12,000) made a broker fail its start-up with 'already registered by broker 2'."""
    picked = [free_port() for _ in range(500)]
    assert len(set(picked)) == len(picked)
