//! A TCP proxy between a client and Redis that a test can cut (a network partition: bytes stop
//! flowing both ways, on old and new connections, until healed) or have lose one reply (the
//! request reaches Redis, the answer never comes back and the connection drops).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A proxy listening on a free local port, forwarding to `127.0.0.1:UPSTREAM`.
pub struct Proxy {
    port: u16,
    cut: watch::Sender<bool>,
    lose_reply: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Starts forwarding to the local port `upstream`.
    pub async fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let (cut, _) = watch::channel(false);
        let lose_reply = Arc::new(AtomicBool::new(false));
        let carry = (cut.clone(), lose_reply.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (cut, lose_reply) = (carry.0.subscribe(), carry.1.clone());
                tokio::spawn(connection(client, upstream, cut, lose_reply));
            }
        });
        Proxy {
            port,
            cut,
            lose_reply,
            task,
        }
    }

    /// The URL a Redis client uses to go through the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops carrying bytes, both ways, on every connection (new ones are accepted and held).
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Carries bytes again; what was held is delivered.
    pub fn heal(&self) {
        self.cut.send_replace(false);
    }

    /// The next reply from Redis is thrown away and its connection closed; the request it
    /// answers has been carried out.
    pub fn lose_next_reply(&self) {
        self.lose_reply.store(true, Ordering::SeqCst);
    }

    /// Whether an armed [`Proxy::lose_next_reply`] has happened.
    pub fn reply_lost(&self) -> bool {
        !self.lose_reply.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Carries one client connection until either side closes it.
async fn connection(
    client: TcpStream,
    upstream: u16,
    mut cut: watch::Receiver<bool>,
    lose_reply: Arc<AtomicBool>,
) {
    if cut.wait_for(|cut| !*cut).await.is_err() {
        return;
    }
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
        return;
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (mut client_in, mut client_out) = client.into_split();
    let (mut server_in, mut server_out) = server.into_split();
    let never_lose = Arc::new(AtomicBool::new(false));
    tokio::select! {
        () = pump(&mut client_in, &mut server_out, cut.clone(), never_lose) => {}
        () = pump(&mut server_in, &mut client_out, cut, lose_reply) => {}
    }
}

/// Copies `from` to `to`, holding the bytes while the proxy is cut; ends at end of stream,
/// on an error, or after throwing a chunk away when `lose` is armed.
async fn pump(
    from: &mut (impl AsyncReadExt + Unpin),
    to: &mut (impl AsyncWriteExt + Unpin),
    mut cut: watch::Receiver<bool>,
    lose: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if cut.wait_for(|cut| !*cut).await.is_err() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if lose.swap(false, Ordering::SeqCst) {
            return;
        }
        if cut.wait_for(|cut| !*cut).await.is_err() || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
