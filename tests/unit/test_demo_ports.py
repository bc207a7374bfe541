"""``ragpulse demo`` takes its default ports unless something listens there."""

from __future__ import annotations

import socket

from ragpulse.cli.demo import _free_or_zero


def _listener() -> socket.socket:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    return server


def test_a_port_with_a_listener_is_taken() -> None:
    with _listener() as server:
        assert _free_or_zero(server.getsockname()[1]) == 0


def test_a_port_left_in_time_wait_by_the_last_run_is_free() -> None:
    # The last demo's collector closed its connections first (the demo's own /metrics
    # fetch): they sit in TIME_WAIT on its port, which the servers can bind again.
    server = _listener()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    accepted.close()  # the server side closes first: its end goes to TIME_WAIT
    client.recv(1)
    client.close()
    server.close()
    assert _free_or_zero(port) == port
