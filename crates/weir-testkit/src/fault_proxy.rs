//! A TCP proxy that injects network faults between weir and one endpoint, for outage
//! tests: the link can go down (every connection reset, new ones refused with a
//! reset), become a black hole (connections accepted, nothing answered, as a
//! partition looks from one side), add latency to every request, or cut a share of
//! responses with a reset mid-stream.
//!
//! The proxy is transparent otherwise: bytes pass unchanged in both directions, and
//! half-closes are forwarded, so HTTP/1.1 and HTTP/2 (enhanced fan-out) work through
//! it. Faults change while connections are open: a connection stalled by a black
//! hole resumes when the link comes back (TCP would retransmit), one that was up
//! when the link went down is reset.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// Whether the link passes traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Link {
    /// Traffic passes (with the latency and resets of [`Faults`]).
    #[default]
    Up,
    /// Every open connection is reset; new ones are accepted and reset at once
    /// (as a stopped service behind a load balancer answers).
    Down,
    /// Connections are accepted and held; nothing is forwarded either way until the
    /// link comes back.
    BlackHole,
}

/// The faults the proxy injects now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    /// Up, down or black-holed.
    pub link: Link,
    /// Added before each chunk a client sends is forwarded (so, to every request).
    pub latency: Duration,
    /// Chance, in thousandths, that a chunk of a response is cut: half of it is
    /// forwarded, then both sides are reset.
    pub reset_per_mille: u32,
}

impl Faults {
    /// No faults.
    pub fn none() -> Faults {
        Faults::default()
    }
    /// The link down.
    pub fn down() -> Faults {
        Faults { link: Link::Down, ..Faults::default() }
    }
    /// The link black-holed.
    pub fn black_hole() -> Faults {
        Faults { link: Link::BlackHole, ..Faults::default() }
    }
    /// A slow, lossy link: `latency` per request and `reset_per_mille` of response
    /// chunks cut.
    pub fn degraded(latency: Duration, reset_per_mille: u32) -> Faults {
        Faults { link: Link::Up, latency, reset_per_mille }
    }
}

/// What the proxy saw.
#[derive(Debug, Default)]
pub struct ProxyStats {
    connections: AtomicU64,
    resets: AtomicU64,
    bytes: AtomicU64,
}

impl ProxyStats {
    /// Connections accepted.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }
    /// Connections the proxy reset (link down, or a cut response).
    pub fn resets(&self) -> u64 {
        self.resets.load(Ordering::Relaxed)
    }
    /// Bytes forwarded, both directions.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// A running proxy. It owns its accept task, which owns every connection task:
/// dropping the proxy stops them all.
#[derive(Debug)]
pub struct FaultProxy {
    port: u16,
    faults: watch::Sender<Faults>,
    stats: Arc<ProxyStats>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `target`. `seed` makes the
    /// random resets repeatable. Must be called inside a tokio runtime.
    pub async fn start(target: SocketAddr, seed: u64) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let (faults, watch) = watch::channel(Faults::none());
        let stats = Arc::new(ProxyStats::default());
        let accept = tokio::spawn(accept_loop(listener, target, watch, Arc::clone(&stats), seed));
        Ok(FaultProxy { port, faults, stats, accept })
    }

    /// Forwards to the emulator at `endpoint` (`http://127.0.0.1:<port>`).
    pub async fn in_front_of(endpoint: &str, seed: u64) -> std::io::Result<FaultProxy> {
        let addr = endpoint.trim_start_matches("http://").trim_end_matches('/');
        let target: SocketAddr =
            addr.parse().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{addr}: {e}")))?;
        FaultProxy::start(target, seed).await
    }

    /// `http://127.0.0.1:<port>`, for a client's endpoint setting.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Injects `faults` from now on (open connections included).
    pub fn set(&self, faults: Faults) {
        self.faults.send_replace(faults);
    }

    /// The faults injected now.
    pub fn faults(&self) -> Faults {
        self.faults.borrow().clone()
    }

    /// What the proxy saw so far.
    pub fn stats(&self) -> &ProxyStats {
        &self.stats
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    faults: watch::Receiver<Faults>,
    stats: Arc<ProxyStats>,
    seed: u64,
) {
    // Owned here: aborting this task drops the set, which aborts every connection.
    let mut connections = JoinSet::new();
    let mut n: u64 = 0;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                n += 1;
                stats.connections.fetch_add(1, Ordering::Relaxed);
                let rng = StdRng::seed_from_u64(seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
                connections.spawn(connection(client, target, faults.clone(), Arc::clone(&stats), rng));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Closes `s` with a reset (linger zero) instead of a FIN.
fn reset(s: TcpStream) {
    let _ = s.set_zero_linger();
    drop(s);
}

async fn connection(
    mut client: TcpStream,
    target: SocketAddr,
    mut faults: watch::Receiver<Faults>,
    stats: Arc<ProxyStats>,
    mut rng: StdRng,
) {
    // Wait out a black hole before connecting; a link that is down resets.
    loop {
        let link = faults.borrow_and_update().link;
        match link {
            Link::Up => break,
            Link::Down => {
                stats.resets.fetch_add(1, Ordering::Relaxed);
                return reset(client);
            }
            Link::BlackHole => {
                if faults.changed().await.is_err() {
                    return;
                }
            }
        }
    }
    let Ok(mut upstream) = TcpStream::connect(target).await else {
        stats.resets.fetch_add(1, Ordering::Relaxed);
        return reset(client);
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let outcome = forward(&mut client, &mut upstream, &mut faults, &stats, &mut rng).await;
    if outcome == End::Reset {
        stats.resets.fetch_add(1, Ordering::Relaxed);
        reset(client);
        reset(upstream);
    }
}

#[derive(Debug, PartialEq, Eq)]
enum End {
    Closed,
    Reset,
}

async fn forward(
    client: &mut TcpStream,
    upstream: &mut TcpStream,
    faults: &mut watch::Receiver<Faults>,
    stats: &ProxyStats,
    rng: &mut StdRng,
) -> End {
    let (mut client_rx, mut client_tx) = client.split();
    let (mut upstream_rx, mut upstream_tx) = upstream.split();
    let mut request = vec![0u8; 16 * 1024];
    let mut response = vec![0u8; 16 * 1024];
    let (mut client_open, mut upstream_open) = (true, true);
    while client_open || upstream_open {
        let now = faults.borrow_and_update().clone();
        match now.link {
            Link::Down => return End::Reset,
            Link::BlackHole => {
                if faults.changed().await.is_err() {
                    return End::Closed;
                }
                continue;
            }
            Link::Up => {}
        }
        tokio::select! {
            changed = faults.changed() => if changed.is_err() { return End::Closed },
            read = client_rx.read(&mut request), if client_open => match read {
                Ok(0) | Err(_) => {
                    client_open = false;
                    let _ = upstream_tx.shutdown().await;
                }
                Ok(n) => {
                    if !now.latency.is_zero() {
                        tokio::time::sleep(now.latency).await;
                    }
                    if upstream_tx.write_all(&request[..n]).await.is_err() {
                        return End::Reset;
                    }
                    stats.bytes.fetch_add(n as u64, Ordering::Relaxed);
                }
            },
            read = upstream_rx.read(&mut response), if upstream_open => match read {
                Ok(0) | Err(_) => {
                    upstream_open = false;
                    let _ = client_tx.shutdown().await;
                }
                Ok(n) => {
                    if now.reset_per_mille > 0 && rng.random_range(0..1000) < now.reset_per_mille {
                        let _ = client_tx.write_all(&response[..n / 2]).await;
                        return End::Reset;
                    }
                    if client_tx.write_all(&response[..n]).await.is_err() {
                        return End::Reset;
                    }
                    stats.bytes.fetch_add(n as u64, Ordering::Relaxed);
                }
            },
        }
    }
    End::Closed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server: answers each chunk with the same bytes.
    async fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn round_trip(s: &mut TcpStream, msg: &[u8]) -> std::io::Result<Vec<u8>> {
        s.write_all(msg).await?;
        let mut got = vec![0u8; msg.len()];
        s.read_exact(&mut got).await?;
        Ok(got)
    }

    #[tokio::test]
    async fn passes_bytes_unchanged_when_up() {
        let proxy = FaultProxy::start(echo().await, 1).await.unwrap();
        let mut s = TcpStream::connect(("127.0.0.1", proxy.port())).await.unwrap();
        assert_eq!(round_trip(&mut s, b"hello").await.unwrap(), b"hello");
        assert_eq!(proxy.stats().connections(), 1);
        // The request is counted before it is forwarded, so before the echo returns.
        assert!(proxy.stats().bytes() >= 5);
    }

    #[tokio::test]
    async fn down_resets_open_and_new_connections_and_up_heals() {
        let proxy = FaultProxy::start(echo().await, 1).await.unwrap();
        let mut open = TcpStream::connect(("127.0.0.1", proxy.port())).await.unwrap();
        assert_eq!(round_trip(&mut open, b"a").await.unwrap(), b"a");
        proxy.set(Faults::down());
        let mut buf = [0u8; 1];
        // The open connection ends (reset or EOF, never an answer).
        let got = open.read(&mut buf).await;
        assert!(matches!(got, Ok(0) | Err(_)), "{got:?}");
        let mut new = TcpStream::connect(("127.0.0.1", proxy.port())).await.unwrap();
        assert!(round_trip(&mut new, b"b").await.is_err());
        proxy.set(Faults::none());
        let mut healed = TcpStream::connect(("127.0.0.1", proxy.port())).await.unwrap();
        assert_eq!(round_trip(&mut healed, b"c").await.unwrap(), b"c");
        assert!(proxy.stats().resets() >= 2);
    }

    #[tokio::test(start_paused = true)]
    async fn black_hole_holds_until_the_link_returns() {
        let proxy = FaultProxy::start(echo().await, 1).await.unwrap();
        let mut s = TcpStream::connect(("127.0.0.1", proxy.port())).await.unwrap();
        proxy.set(Faults::black_hole());
        s.write_all(b"held").await.unwrap();
        let mut got = [0u8; 4];
        let waited = tokio::time::timeout(Duration::from_secs(30), s.read_exact(&mut got)).await;
        assert!(waited.is_err(), "a black hole answered");
        proxy.set(Faults::none());
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"held");
    }

    #[tokio::test(start_paused = true)]
    async fn latency_delays_each_request() {
        let proxy = FaultProxy::start(echo().await, 1).await.unwrap();
        proxy.set(Faults::degraded(Duration::from_millis(500), 0));
        let mut s = TcpStream::connect(("127.0.0.1", proxy.port())).await.unwrap();
        let started = tokio::time::Instant::now();
        assert_eq!(round_trip(&mut s, b"x").await.unwrap(), b"x");
        assert!(started.elapsed() >= Duration::from_millis(500), "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn resets_cut_responses_at_the_configured_rate() {
        let proxy = FaultProxy::start(echo().await, 7).await.unwrap();
        proxy.set(Faults::degraded(Duration::ZERO, 500));
        let (mut cut, mut whole) = (0, 0);
        for _ in 0..100 {
            let mut s = TcpStream::connect(("127.0.0.1", proxy.port())).await.unwrap();
            match round_trip(&mut s, b"0123456789").await {
                Ok(got) => {
                    assert_eq!(got, b"0123456789", "a passed response is whole");
                    whole += 1;
                }
                Err(_) => cut += 1,
            }
        }
        assert!((25..=75).contains(&cut), "cut {cut} of 100 at 50%");
        assert_eq!(cut + whole, 100);
        assert_eq!(proxy.stats().resets(), cut);
    }
}
