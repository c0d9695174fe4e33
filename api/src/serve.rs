//! The one server builder both binaries use: an axum router behind a TCP listener (or a unix
//! socket, for the sidecar's local API, PROTOCOL P16.1), optionally
//! TLS with client certificates (PROTOCOL P13.2), with the limits of P13.6 applied before any
//! request reaches a handler:
//! - a TLS handshake must finish within [`ListenerLimits::handshake_timeout`];
//! - a request's headers must arrive within [`ListenerLimits::header_read_timeout`] (HTTP/1.1
//!   only: a slow client cannot hold a connection by trickling headers); the same bound closes a
//!   keep-alive connection idle that long, since hyper starts it when it waits for a request;
//! - at most [`ListenerLimits::max_connections`] connections are open on the listener, within one
//!   budget every listener of the process shares (half the process's descriptor limit,
//!   [`ConnectionBudget`]), and at most the budget's share per source address; past a bound the
//!   listener stops accepting (the kernel backlog holds the rest) instead of spawning without
//!   bound, and a connection past its address's share is closed as soon as it is accepted.
//!
//! [`bind`] makes the listener with a backlog for a fleet connecting at once.
//!
//! The role of the TLS peer's certificate is handed to the router as a [`PeerRole`] request
//! extension, so authorization is one layer that reads it, not a check in every handler; the
//! peer's socket address as an `axum::extract::ConnectInfo<SocketAddr>` extension.
//! Bodies are bounded by each router's own limits and request timeouts.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio::sync::{watch, Semaphore};
use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

use crate::tls::{NamespaceScope, Role};
use tower::ServiceExt;

pub use crate::connection_budget::{connection_bound, ConnectionBudget, MAX_CONNECTIONS};

/// Bounds applied to every connection before a handler runs (P13.6).
#[derive(Debug, Clone)]
pub struct ListenerLimits {
    pub handshake_timeout: Duration,
    pub header_read_timeout: Duration,
    /// Longest a write to the peer may make no progress: a reader that stops reading a reply
    /// is cut off after it, rather than holding the reply (and whatever it holds) for ever.
    pub send_timeout: Duration,
    /// This listener's own cap, within the process's budget.
    pub max_connections: usize,
    /// The process's budget, shared by its listeners ([`ConnectionBudget`]).
    pub budget: ConnectionBudget,
}

/// The health listener's cap: probes need a handful of connections, and a stranger holding
/// more takes nothing from the API's share of the budget.
pub const HEALTH_MAX_CONNECTIONS: usize = 64;

/// The health listener's header and idle bound: a probe sends its request at once.
pub const HEALTH_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Raises this process's soft descriptor limit to its hard limit, as Go's runtime and most
/// servers do at start (the soft default of 1 024 is for programs that still use `select`).
/// For the binaries' `main`: a library leaves its embedder's limits alone.
pub fn raise_open_files_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            if let Err(error) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                tracing::warn!(soft, hard, %error, "raising the descriptor limit");
            }
        }
    }
}

impl ListenerLimits {
    /// A process's only listener: the default limits within a budget fitted to this process's
    /// descriptor limit. A process with several listeners makes one [`ConnectionBudget`] and
    /// gives each [`ListenerLimits::within`] it.
    pub fn for_this_process() -> Self {
        Self::within(&ConnectionBudget::for_this_process(None))
    }

    /// A listener that may use all of `budget`, which it shares with the process's others.
    pub fn within(budget: &ConnectionBudget) -> Self {
        Self {
            max_connections: budget.total(),
            budget: budget.clone(),
            ..Self::default()
        }
    }

    /// The plaintext health listener: a few connections of `budget`, and a short idle bound.
    pub fn health(budget: &ConnectionBudget) -> Self {
        Self {
            max_connections: HEALTH_MAX_CONNECTIONS.min(budget.total()),
            header_read_timeout: HEALTH_HEADER_READ_TIMEOUT,
            ..Self::within(budget)
        }
    }
}

impl Default for ListenerLimits {
    fn default() -> Self {
        Self {
            handshake_timeout: Duration::from_secs(10),
            // Also the idle bound of a keep-alive connection (hyper starts it while waiting for
            // the next request, and on a new connection before its first byte), so it is above
            // the renewal interval at the default lease (60 s / 3): an executor keeps its
            // connection, and under TLS its session, between renewals instead of paying a
            // handshake for each one.
            header_read_timeout: Duration::from_secs(30),
            // As nginx's `send_timeout`: between two writes that made progress, not for a whole
            // reply, so a large answer to a slow but reading client is not cut.
            send_timeout: Duration::from_secs(30),
            max_connections: MAX_CONNECTIONS,
            budget: ConnectionBudget::new(MAX_CONNECTIONS, MAX_CONNECTIONS),
        }
    }
}

/// The role the TLS peer's verified certificate carries (P13.1), or why it carries none; absent
/// on plaintext listeners and for a peer without a certificate. Read once per connection, when
/// the handshake verified the certificate, not once per request.
#[derive(Debug, Clone)]
pub struct PeerRole(Result<(Role, NamespaceScope), Arc<str>>, [u8; 32], Arc<str>);

impl PeerRole {
    /// What a verified leaf certificate carries. The listener reads it once per connection; a
    /// router driven in process (tests) inserts it as the listener would.
    pub fn of(leaf: &CertificateDer<'_>) -> Self {
        use sha2::Digest;
        Self(
            Role::and_scope_of_certificate(leaf).map_err(|e| Arc::from(e.to_string())),
            sha2::Sha256::digest(leaf.as_ref()).into(),
            Arc::from(Role::subject_of_certificate(leaf)),
        )
    }

    /// The peer certificate's subject (RFC 4514, printable ASCII): who it names, for the audit
    /// log (P17.4).
    pub fn subject(&self) -> &str {
        &self.2
    }

    pub fn role(&self) -> Result<Role, &str> {
        self.0.as_ref().map(|(role, _)| *role).map_err(|e| &**e)
    }

    /// The namespaces the peer's certificate is limited to (P18.2); a certificate without a
    /// role has none to act in, and [`PeerRole::role`] refuses it first.
    pub fn scope(&self) -> Result<&NamespaceScope, &str> {
        self.0.as_ref().map(|(_, scope)| scope).map_err(|e| &**e)
    }

    /// The SHA-256 of the peer's leaf certificate (DER): which certificate this is, for limits
    /// kept per caller (the manager's registration rate limit, P13.6).
    pub fn certificate_sha256(&self) -> [u8; 32] {
        self.1
    }
}

/// Connections the kernel queues for [`serve`] to accept. A whole fleet connecting at once (a
/// new leader, a restart) would overflow a default backlog of 128: the kernel drops the rest and
/// each client retries only after a one-second SYN timeout. The kernel caps it at
/// `net.core.somaxconn`.
pub const LISTEN_BACKLOG: u32 = 4_096;

/// Binds a listener for [`serve`] on the first address `address` resolves to that can be bound,
/// with [`LISTEN_BACKLOG`] and `SO_REUSEADDR` (as the standard library sets it, so a restarted
/// process can bind while old connections are in TIME_WAIT).
pub async fn bind(address: impl tokio::net::ToSocketAddrs) -> io::Result<TcpListener> {
    let mut last_error = None;
    for candidate in tokio::net::lookup_host(address).await? {
        let socket = if candidate.is_ipv4() {
            tokio::net::TcpSocket::new_v4()
        } else {
            tokio::net::TcpSocket::new_v6()
        };
        let bound = socket.and_then(|socket| {
            socket.set_reuseaddr(true)?;
            socket.bind(candidate)?;
            socket.listen(LISTEN_BACKLOG)
        });
        match bound {
            Ok(listener) => return Ok(listener),
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "the address resolves to nothing",
        )
    }))
}

/// Serves `router` on `listener` until `shutdown` completes, then lets open requests finish
/// (connections are told to close after their current request) and returns once every
/// connection has closed. With `tls`, only TLS is spoken and the handshake's client
/// verification (the config's verifier) decides who may connect at all.
pub async fn serve(
    listener: impl Into<AnyListener>,
    router: Router,
    tls: Option<Arc<ServerConfig>>,
    limits: ListenerLimits,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let listener = listener.into();
    let tls = tls.map(|config| TlsAcceptor::from(with_http1_alpn(&config)));
    let max_connections = limits.max_connections.max(1);
    let connections = Arc::new(Semaphore::new(max_connections));
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        // This listener's slot, then one of the process's budget: a listener at its cap leaves
        // the budget to the others, and a spent budget stops every listener accepting.
        let permit = tokio::select! {
            permit = connections.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let budget_slot = tokio::select! {
            slot = limits.budget.slot() => match slot {
                Some(slot) => slot,
                None => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, peer_addr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // A unix socket's peers are this machine's processes, all one "address".
        let address_slot = match &stream {
            Accepted::Tcp(_) => match limits.budget.admit(peer_addr.ip()) {
                Ok(slot) => Some(slot),
                // Closed at once (dropped): counted and logged by the budget.
                Err(_) => continue,
            },
            Accepted::Unix(_) => None,
        };
        let timeouts = Timeouts {
            handshake: limits.handshake_timeout,
            header_read: limits.header_read_timeout,
            send: limits.send_timeout,
        };
        let slots = (permit, budget_slot, address_slot);
        spawn_connection(stream, peer_addr, &router, &tls, timeouts, &stop_rx, slots);
    }
    let _ = stop_tx.send(true);
    // Every connection holds a permit until it closes: all of them back means all closed.
    let all = u32::try_from(max_connections).unwrap_or(u32::MAX);
    let _closed = connections.acquire_many(all).await;
    Ok(())
}

/// Serves one accepted connection on a task of its own, holding `slots` (its permit and
/// budget slots) until it closes.
fn spawn_connection(
    stream: Accepted,
    peer_addr: SocketAddr,
    router: &Router,
    tls: &Option<TlsAcceptor>,
    timeouts: Timeouts,
    stop: &watch::Receiver<bool>,
    slots: impl Send + 'static,
) {
    let router = router.clone();
    let tls = tls.clone();
    let stop = stop.clone();
    tokio::spawn(async move {
        serve_connection(stream, peer_addr, router, tls, timeouts, stop).await;
        tracing::trace!(%peer_addr, "connection closed");
        drop(slots);
    });
}

/// What [`serve`] accepts connections on.
#[derive(Debug)]
pub enum AnyListener {
    Tcp(TcpListener),
    /// A unix socket: plaintext only (a TLS configuration is ignored), and handlers see the
    /// peer as [`UNIX_PEER`].
    Unix(UnixListener),
}

/// The peer address handlers see for a connection over a unix socket, which has none.
pub const UNIX_PEER: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

impl From<TcpListener> for AnyListener {
    fn from(listener: TcpListener) -> Self {
        AnyListener::Tcp(listener)
    }
}

impl From<UnixListener> for AnyListener {
    fn from(listener: UnixListener) -> Self {
        AnyListener::Unix(listener)
    }
}

/// An accepted connection, before any TLS.
enum Accepted {
    Tcp(TcpStream),
    Unix(tokio::net::UnixStream),
}

impl AnyListener {
    async fn accept(&self) -> io::Result<(Accepted, SocketAddr)> {
        match self {
            AnyListener::Tcp(listener) => {
                let (stream, peer) = listener.accept().await?;
                Ok((Accepted::Tcp(stream), peer))
            }
            AnyListener::Unix(listener) => {
                let (stream, _) = listener.accept().await?;
                Ok((Accepted::Unix(stream), UNIX_PEER))
            }
        }
    }
}

/// HTTP/1.1 only: its header-read timeout is what keeps a slow client from holding a connection.
fn with_http1_alpn(config: &Arc<ServerConfig>) -> Arc<ServerConfig> {
    let mut config = ServerConfig::clone(config);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// The bounds of one connection.
#[derive(Debug, Clone, Copy)]
struct Timeouts {
    handshake: Duration,
    header_read: Duration,
    send: Duration,
}

async fn serve_connection(
    stream: Accepted,
    peer_addr: SocketAddr,
    router: Router,
    tls: Option<TlsAcceptor>,
    timeouts: Timeouts,
    stop: watch::Receiver<bool>,
) {
    let stream = match stream {
        Accepted::Tcp(stream) => stream,
        Accepted::Unix(stream) => {
            let stream = SendTimeout::new(stream, timeouts.send);
            serve_http(
                TokioIo::new(stream),
                peer_addr,
                router,
                None,
                timeouts.header_read,
                stop,
            )
            .await;
            return;
        }
    };
    // Replies go out whole; without TCP_NODELAY a reply's last segment can wait on the peer's
    // delayed ACK (Nagle), which would sit on every Raft round trip and renewal.
    if let Err(error) = stream.set_nodelay(true) {
        tracing::debug!(%error, "setting TCP_NODELAY");
    }
    let stream = SendTimeout::new(stream, timeouts.send);
    match tls {
        None => {
            serve_http(
                TokioIo::new(stream),
                peer_addr,
                router,
                None,
                timeouts.header_read,
                stop,
            )
            .await
        }
        Some(acceptor) => serve_tls(stream, acceptor, peer_addr, router, timeouts, stop).await,
    }
}

/// Serves HTTP over TLS once the handshake finished within its timeout, as the role of the
/// peer's leaf certificate (if it sent one).
async fn serve_tls(
    stream: SendTimeout<TcpStream>,
    acceptor: TlsAcceptor,
    peer_addr: SocketAddr,
    router: Router,
    timeouts: Timeouts,
    stop: watch::Receiver<bool>,
) {
    let handshake_timeout = timeouts.handshake;
    let handshake = tokio::time::timeout(handshake_timeout, acceptor.accept(stream));
    let stream = match handshake.await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            tracing::debug!(%error, "TLS handshake refused");
            return;
        }
        Err(_) => {
            tracing::debug!(
                timeout_ms = handshake_timeout.as_millis(),
                "TLS handshake not finished in time; closing"
            );
            return;
        }
    };
    let peer = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first().map(PeerRole::of));
    serve_http(
        TokioIo::new(stream),
        peer_addr,
        router,
        peer,
        timeouts.header_read,
        stop,
    )
    .await;
}

async fn serve_http<I>(
    io: TokioIo<I>,
    peer_addr: SocketAddr,
    router: Router,
    peer: Option<PeerRole>,
    header_read_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    // A peer certificate is there exactly on TLS connections (the handshake requires one).
    let tls = peer.is_some();
    let service = router.map_request(move |mut request: Request<Incoming>| {
        // The peer's address, as `into_make_service_with_connect_info` would give it.
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(peer_addr));
        if let Some(peer) = &peer {
            request.extensions_mut().insert(peer.clone());
        }
        request
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .keep_alive(true)
        // A reply's head and body flattened into one buffer become one TLS record and one
        // write, instead of a record per piece.
        .writev(!tls);
    let connection = builder
        .serve_connection(io, TowerToHyperService::new(service))
        .with_upgrades();
    tokio::pin!(connection);
    let stopped = async {
        if !*stop.borrow_and_update() {
            let _ = stop.changed().await;
        }
    };
    tokio::select! {
        result = connection.as_mut() => log_connection_end(result),
        () = stopped => {
            connection.as_mut().graceful_shutdown();
            log_connection_end(connection.await);
        }
    }
}

/// A connection whose writes fail with `TimedOut` once one has made no progress for its bound
/// (P13.6): a peer that stops reading cannot hold a reply, its buffers and what the reply holds
/// (a heavy read's permit, say) for ever. Reads pass through; their bounds are hyper's.
struct SendTimeout<I> {
    inner: I,
    bound: Duration,
    /// Started when a write could not go on; cleared by any progress.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<I> SendTimeout<I> {
    fn new(inner: I, bound: Duration) -> Self {
        Self {
            inner,
            bound,
            stalled: None,
        }
    }

    /// After the inner write answered `poll`: `Pending` starts (or goes on with) the stall's
    /// timer, and a stall past the bound is an error; anything else clears it.
    fn watch<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.stalled = None;
            return poll;
        }
        let bound = self.bound;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(bound)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the peer read nothing for {bound:?}"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<I: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for SendTimeout<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for SendTimeout<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, poll)
    }
}

fn log_connection_end(result: Result<(), hyper::Error>) {
    if let Err(error) = result {
        // Clients going away mid-request and header-read timeouts end here; neither is ours.
        tracing::debug!(%error, "connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::rustls::pki_types::PrivateKeyDer;

    use super::*;

    async fn start(limits: ListenerLimits) -> (SocketAddr, watch::Sender<bool>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let router = Router::new().route("/", get(|| async { "ok" }));
        let (stop_tx, mut stop_rx) = watch::channel(false);
        tokio::spawn(serve(listener, router, None, limits, async move {
            let _ = stop_rx.changed().await;
        }));
        (address, stop_tx)
    }

    async fn get_root(address: SocketAddr) -> String {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await.unwrap();
        reply
    }

    #[tokio::test]
    async fn serves_requests() {
        let (address, _stop) = start(ListenerLimits::default()).await;
        assert!(get_root(address).await.ends_with("ok"));
    }

    /// P13.6: a client that never finishes its headers is disconnected at the header timeout.
    #[tokio::test]
    async fn a_client_that_never_finishes_its_headers_is_disconnected() {
        let limits = ListenerLimits {
            header_read_timeout: Duration::from_millis(300),
            ..ListenerLimits::default()
        };
        let (address, _stop) = start(limits).await;
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        let started = Instant::now();
        let mut buffer = [0u8; 256];
        // The server closes (EOF, possibly after a 408) rather than waiting for the rest.
        let closed = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => continue,
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "still open after {:?}", started.elapsed());
    }

    /// A keep-alive connection idle for longer than the renewal interval at the default lease
    /// (20 s) is still served: executors keep their connections (and TLS sessions) between
    /// renewals.
    #[tokio::test(start_paused = true)]
    async fn a_keep_alive_connection_idle_between_renewals_is_kept() {
        let (address, _stop) = start(ListenerLimits::default()).await;
        let mut stream = TcpStream::connect(address).await.unwrap();
        let mut buffer = [0u8; 256];
        for attempt in 0..2 {
            stream
                .write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
                .await
                .unwrap();
            let read = stream.read(&mut buffer).await.unwrap();
            let reply = String::from_utf8_lossy(&buffer[..read]);
            assert!(reply.ends_with("ok"), "request {attempt}: {reply:?}");
            tokio::time::sleep(Duration::from_secs(25)).await;
        }
    }

    #[tokio::test]
    async fn bind_listens_with_the_large_backlog() {
        let listener = bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        // More connections than a default backlog of 128 complete their handshake before one
        // is accepted.
        let mut clients = Vec::new();
        for _ in 0..300 {
            let connect = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(address));
            clients.push(connect.await.expect("queued, not dropped").unwrap());
        }
        assert!(bind("no-such-host.invalid:0").await.is_err());
    }

    /// P13.6: past the bound, connections wait to be accepted instead of being served.
    #[tokio::test]
    async fn at_most_max_connections_are_served_at_once() {
        let limits = ListenerLimits {
            max_connections: 1,
            ..ListenerLimits::default()
        };
        let (address, _stop) = start(limits).await;
        // The first connection holds the only slot (an idle keep-alive connection).
        let first = served_and_kept(address).await;
        served_once_closed(first, address, "the bound").await;
    }

    /// A connection to `address` that was served once and is kept open (keep-alive).
    async fn served_and_kept(address: SocketAddr) -> TcpStream {
        let mut kept = TcpStream::connect(address).await.unwrap();
        kept.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buffer = [0u8; 256];
        assert!(kept.read(&mut buffer).await.unwrap() > 0);
        kept
    }

    /// A request to `address` waits while `held` holds the slot `bound` names, and is served once
    /// `held` closes.
    async fn served_once_closed(held: TcpStream, address: SocketAddr, bound: &str) {
        let waiting = tokio::spawn(get_root(address));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "served past {bound}");
        drop(held);
        let reply = tokio::time::timeout(Duration::from_secs(20), waiting)
            .await
            .expect("served once the held connection closed")
            .unwrap();
        assert!(reply.ends_with("ok"));
    }

    /// P13.6: a peer that stops reading a large reply is cut off once a write has made no
    /// progress for the send timeout, and the reply (with what it holds) is dropped.
    #[tokio::test]
    async fn p13_6_a_peer_that_stops_reading_is_cut_off() {
        struct Held(Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Held {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let held = Arc::new(std::sync::Mutex::new(Some(Held(dropped.clone()))));
        let router = Router::new().route(
            "/",
            get(move || {
                let held = held.lock().unwrap().take();
                async move {
                    // 64 MiB in 1 MiB pieces, far past every socket buffer; the body holds
                    // `held` until it is dropped.
                    let chunks = (0..64).map(move |_| {
                        let _ = &held;
                        Ok::<_, io::Error>(axum::body::Bytes::from(vec![b'x'; 1 << 20]))
                    });
                    axum::body::Body::from_stream(futures_util::stream::iter(chunks))
                }
            }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let limits = ListenerLimits {
            send_timeout: Duration::from_millis(300),
            ..ListenerLimits::default()
        };
        let (_stop, mut stop_rx) = watch::channel(false);
        tokio::spawn(serve(listener, router, None, limits, async move {
            let _ = stop_rx.changed().await;
        }));
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        // Read nothing: the reply stalls, and the connection is cut.
        let started = Instant::now();
        while !dropped.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the stalled reply was not dropped"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// P13.6: a source address past its share of the budget is closed at once; another
    /// address is served meanwhile.
    #[tokio::test]
    async fn p13_6_a_source_past_its_share_is_closed_and_others_are_served() {
        let budget = ConnectionBudget::new(4, 1);
        let (address, _stop) = start(ListenerLimits::within(&budget)).await;
        let from = |source: &str| {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket
                .bind(SocketAddr::new(source.parse().unwrap(), 0))
                .unwrap();
            socket.connect(address)
        };
        // The stranger's first connection holds its one slot.
        let mut held = from("127.0.0.2").await.unwrap();
        held.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buffer = [0u8; 256];
        assert!(held.read(&mut buffer).await.unwrap() > 0);
        let mut second = from("127.0.0.2").await.unwrap();
        let closed = tokio::time::timeout(Duration::from_secs(20), second.read(&mut buffer)).await;
        assert!(
            matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
            "the second connection of one address is closed: {closed:?}"
        );
        assert_eq!(budget.refused_per_address(), 1);
        assert!(
            get_root(address).await.ends_with("ok"),
            "127.0.0.1 is served"
        );
    }

    /// P13.6: two listeners of one process share its budget: what one holds the other cannot.
    #[tokio::test]
    async fn p13_6_listeners_draw_on_one_budget() {
        let budget = ConnectionBudget::new(1, 1);
        let (first_listener, _stop_first) = start(ListenerLimits::within(&budget)).await;
        let (second_listener, _stop_second) = start(ListenerLimits::within(&budget)).await;
        let held = served_and_kept(first_listener).await;
        served_once_closed(held, second_listener, "the shared budget").await;
    }

    /// P13.6: a connection that never starts its TLS handshake is closed at the handshake
    /// timeout, before anything reaches HTTP.
    #[tokio::test]
    async fn a_connection_that_never_handshakes_is_closed() {
        let key = rcgen::KeyPair::generate().unwrap();
        let certificate = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let config = ServerConfig::builder_with_provider(crate::tls::crypto_provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![certificate.der().clone()],
                PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
            )
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let router = Router::new().route("/", get(|| async { "ok" }));
        let limits = ListenerLimits {
            handshake_timeout: Duration::from_millis(300),
            ..ListenerLimits::default()
        };
        let (_stop, mut stop_rx) = watch::channel(false);
        tokio::spawn(serve(
            listener,
            router,
            Some(Arc::new(config)),
            limits,
            async move {
                let _ = stop_rx.changed().await;
            },
        ));
        let mut stream = TcpStream::connect(address).await.unwrap();
        let mut buffer = [0u8; 64];
        let closed = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buffer)).await;
        assert!(
            matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
            "still open: {closed:?}"
        );
    }

    #[tokio::test]
    async fn shutdown_waits_for_open_connections_then_returns() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let router = Router::new().route("/", get(|| async { "ok" }));
        let (stop_tx, mut stop_rx) = watch::channel(false);
        let served = tokio::spawn(serve(
            listener,
            router,
            None,
            ListenerLimits::default(),
            async move {
                let _ = stop_rx.changed().await;
            },
        ));
        assert!(get_root(address).await.ends_with("ok"));
        stop_tx.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(20), served)
            .await
            .expect("serve returns after shutdown")
            .unwrap()
            .unwrap();
    }
}
