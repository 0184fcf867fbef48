//! Loopback ports for a test: [`free_port`], one that was free a moment ago (for a server
//! that binds it at once and is retried if someone else took it meanwhile), and
//! [`ClosedPort`], one held bound but not listening, so that a connection to it is refused
//! for as long as the test needs.

pub use wasmgear_redis_server::free_port;

/// A loopback port that is bound but not listening, held for as long as this lives: a
/// connection to it is refused, and no server can take it meanwhile (unlike a port that
/// was free a moment ago).
pub struct ClosedPort {
    _socket: tokio::net::TcpSocket,
    port: u16,
}

impl ClosedPort {
    /// Binds a fresh port.
    // (No `Default`: binding a port is an action, not a default value.)
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        let socket = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
        socket
            .bind(([127, 0, 0, 1], 0).into())
            .expect("bind a loopback port");
        let port = socket.local_addr().expect("its address").port();
        ClosedPort {
            _socket: socket,
            port,
        }
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }
}
