"""A loopback TCP proxy for tests that need a connection to stall or drop mid-call: it forwards
every connection to a real server, records what each client sent, and can hold the server's
answers back (``hold``) or cut every open connection (``cut``), as a network or a restarted
server would."""
from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    def __init__(self, target_port: int) -> None:
        self._target = ("127.0.0.1", target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._sent: list[bytearray] = []  # per connection, what its client sent
        self._answering = threading.Event()
        self._answering.set()
        threading.Thread(target=self._accept, daemon=True).start()

    def sent_count(self, marker: bytes) -> int:
        """How many times the clients have sent ``marker``, over every connection so far."""
        with self._lock:
            return sum(bytes(buffer).count(marker) for buffer in self._sent)

    def hold(self) -> None:
        """From now on the server's answers wait in the proxy: the client hears nothing."""
        self._answering.clear()

    def cut(self) -> None:
        """Close every open connection, both ends; later connections are forwarded as usual."""
        with self._lock:
            opened, self._open = self._open, []
        for sock in opened:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._answering.set()

    def close(self) -> None:
        self._listener.close()
        self.cut()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            server = socket.create_connection(self._target)
            buffer = bytearray()
            with self._lock:
                self._open += [client, server]
                self._sent.append(buffer)
            threading.Thread(target=self._pump, args=(client, server, buffer), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, None), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, record: bytearray | None) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if record is None:  # the server's side: held while the proxy holds
                    self._answering.wait()
                else:
                    with self._lock:
                        record += data
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
