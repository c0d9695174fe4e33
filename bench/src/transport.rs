//! `leasehold-loadgen transport`: what one Raft RPC exchange costs on each transport the managers
//! could use, measured the way openraft 0.9 uses it.
//!
//! openraft 0.9's replication task sends one AppendEntries to a follower and awaits its reply
//! before it sends the next (`replication/mod.rs`, `ReplicationCore::main`), so a transport can
//! only change what one sequential exchange costs: a multiplexed connection has nothing to
//! multiplex. Three transports carry the same bodies, one exchange in flight, on loopback:
//! - HTTP/1.1 on a kept-alive connection through reqwest, as `manager/src/raft/network.rs` does;
//! - HTTP/2 on one connection (prior knowledge, no TLS) through reqwest;
//! - length-prefixed frames on one TCP stream, the floor of any streaming transport.
//!
//! The server runs on its own runtime and thread, as a follower is another process; the CPU
//! figure is the whole process's (both ends) per exchange.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::drive::Samples;
use crate::procs::cpu_time;
use crate::report::Table;

/// The reply's size: an AppendEntries response (vote, success or conflict) is tens of bytes.
const REPLY_BYTES: usize = 64;
/// The largest body a frame may announce; requests above it are refused, not allocated.
const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// The pause after a failed accept (e.g. out of descriptors), so the loop does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);

/// One way of carrying a request body to the follower and its reply back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Http1,
    Http2,
    Framed,
}

impl Transport {
    const ALL: [Transport; 3] = [Transport::Http1, Transport::Http2, Transport::Framed];

    fn name(self) -> &'static str {
        match self {
            Transport::Http1 => "HTTP/1.1 keep-alive (today)",
            Transport::Http2 => "HTTP/2, one connection",
            Transport::Framed => "length-prefixed TCP stream",
        }
    }
}

/// The scenario's parameters.
#[derive(Debug, Clone)]
pub struct TransportRun {
    /// Request body sizes, in bytes.
    pub body_sizes: Vec<usize>,
    /// Measured exchanges per transport, body size and round.
    pub exchanges: usize,
    /// Unmeasured exchanges before each measured run, on the same connection.
    pub warmup: usize,
    /// Rounds; each runs every transport once, in turn, so drift spreads over all of them.
    pub rounds: usize,
}

/// Measures every transport at every body size; one row each.
pub fn run(params: &TransportRun) -> Result<Table> {
    if params.exchanges == 0 || params.rounds == 0 || params.body_sizes.is_empty() {
        bail!("transport needs at least one exchange, one round and one body size");
    }
    if let Some(&size) = params.body_sizes.iter().find(|&&s| s > MAX_FRAME_BYTES) {
        bail!("body size {size} is above the frame bound of {MAX_FRAME_BYTES} bytes");
    }
    let servers = Servers::start()?;
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let mut table = Table::new(&[
        "transport",
        "request body",
        "exchanges",
        "p50",
        "p99",
        "mean",
        "CPU per exchange (both ends)",
        "p50 ÷ HTTP/1.1",
    ]);
    for &body_size in &params.body_sizes {
        let body = Bytes::from(vec![0x5a_u8; body_size]);
        let mut results: Vec<(Transport, Samples, Duration)> = Transport::ALL
            .iter()
            .map(|&t| (t, Samples::default(), Duration::ZERO))
            .collect();
        for _ in 0..params.rounds {
            for (transport, samples, cpu) in &mut results {
                let (latencies, used) =
                    client.block_on(exchange_run(*transport, &servers, &body, params))?;
                samples.latencies_us.extend(latencies);
                *cpu += used;
            }
        }
        let http1_p50_ms = results[0].1.quantile_ms(0.5);
        for (transport, mut samples, cpu) in results {
            let count = samples.ok();
            let mean_us = samples.latencies_us.iter().sum::<u64>() as f64 / count as f64;
            let p50_ms = samples.quantile_ms(0.5);
            table.row(vec![
                transport.name().to_owned(),
                format!("{body_size} B"),
                count.to_string(),
                fmt_us(p50_ms * 1000.0),
                fmt_us(samples.quantile_ms(0.99) * 1000.0),
                fmt_us(mean_us),
                fmt_us(cpu.as_secs_f64() * 1e6 / count as f64),
                format!("{:.2}×", p50_ms / http1_p50_ms),
            ]);
        }
    }
    Ok(table)
}

/// Warms a fresh connection up, then times `exchanges` sequential exchanges: their latencies in
/// microseconds and the CPU the process used meanwhile.
async fn exchange_run(
    transport: Transport,
    servers: &Servers,
    body: &Bytes,
    params: &TransportRun,
) -> Result<(Vec<u64>, Duration)> {
    let mut connection = Connection::open(transport, servers).await?;
    for _ in 0..params.warmup {
        connection.exchange(body).await?;
    }
    let pid = std::process::id();
    let cpu_before = cpu_time(pid).context("reading this process's CPU time")?;
    let mut latencies_us = Vec::with_capacity(params.exchanges);
    for _ in 0..params.exchanges {
        let started = Instant::now();
        connection.exchange(body).await?;
        latencies_us.push(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
    }
    let cpu_after = cpu_time(pid).context("reading this process's CPU time")?;
    Ok((latencies_us, cpu_after.saturating_sub(cpu_before)))
}

/// A client's one connection to the follower.
enum Connection {
    Http {
        client: reqwest::Client,
        url: String,
    },
    Framed(TcpStream),
}

impl Connection {
    async fn open(transport: Transport, servers: &Servers) -> Result<Self> {
        Ok(match transport {
            Transport::Http1 | Transport::Http2 => {
                let builder = reqwest::Client::builder()
                    .tcp_nodelay(true)
                    .pool_max_idle_per_host(1);
                let builder = if transport == Transport::Http2 {
                    builder.http2_prior_knowledge()
                } else {
                    builder.http1_only()
                };
                Connection::Http {
                    client: builder.build()?,
                    url: format!("http://{}/raft/append", servers.http),
                }
            }
            Transport::Framed => {
                let stream = TcpStream::connect(servers.framed).await?;
                stream.set_nodelay(true)?;
                Connection::Framed(stream)
            }
        })
    }

    async fn exchange(&mut self, body: &Bytes) -> Result<()> {
        let reply_bytes = match self {
            Connection::Http { client, url } => client
                .post(url.as_str())
                .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                .body(body.clone())
                .send()
                .await?
                .error_for_status()?
                .bytes()
                .await?
                .len(),
            Connection::Framed(stream) => {
                write_frame(stream, body).await?;
                read_frame(stream).await?.len()
            }
        };
        if reply_bytes != REPLY_BYTES {
            bail!("the reply had {reply_bytes} bytes, not {REPLY_BYTES}");
        }
        Ok(())
    }
}

/// Microseconds, as this scenario's figures are tens of them.
fn fmt_us(us: f64) -> String {
    format!("{us:.0} µs")
}

async fn write_frame(stream: &mut TcpStream, body: &[u8]) -> Result<()> {
    let length = u32::try_from(body.len()).context("frame too long")?;
    // One write per frame, as a buffered transport would, so Nagle-free sends stay one segment.
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&length.to_be_bytes());
    frame.extend_from_slice(body);
    stream.write_all(&frame).await?;
    Ok(())
}

async fn read_frame(stream: &mut TcpStream) -> Result<Vec<u8>> {
    let length = stream.read_u32().await? as usize;
    if length > MAX_FRAME_BYTES {
        bail!("a frame announced {length} bytes, above the bound of {MAX_FRAME_BYTES}");
    }
    let mut body = vec![0; length];
    stream.read_exact(&mut body).await?;
    Ok(body)
}

/// The follower's side: an HTTP server speaking HTTP/1.1 and HTTP/2 on one port, and a framed
/// server on another, on a runtime of their own.
struct Servers {
    http: SocketAddr,
    framed: SocketAddr,
    _runtime: tokio::runtime::Runtime,
}

impl Servers {
    fn start() -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("transport-follower")
            .enable_all()
            .build()?;
        let (http, framed) = runtime.block_on(async {
            let http = TcpListener::bind("127.0.0.1:0").await?;
            let framed = TcpListener::bind("127.0.0.1:0").await?;
            anyhow::Ok((http, framed))
        })?;
        let addresses = (http.local_addr()?, framed.local_addr()?);
        runtime.spawn(serve_http(http));
        runtime.spawn(serve_framed(framed));
        Ok(Self {
            http: addresses.0,
            framed: addresses.1,
            _runtime: runtime,
        })
    }
}

async fn serve_http(listener: TcpListener) {
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(ACCEPT_RETRY).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let builder = builder.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(answer_http);
            if let Err(error) = builder
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                eprintln!("transport: an HTTP connection ended with: {error}");
            }
        });
    }
}

async fn answer_http(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, hyper::Error> {
    // The whole body is read before answering, as the Raft endpoint decodes it first.
    request.into_body().collect().await?;
    Ok(Response::new(Full::new(Bytes::from_static(
        &[0xa5; REPLY_BYTES],
    ))))
}

async fn serve_framed(listener: TcpListener) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            tokio::time::sleep(ACCEPT_RETRY).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            // A connection ends when the client drops it; its error is the expected EOF.
            while read_frame(&mut stream).await.is_ok() {
                if write_frame(&mut stream, &[0xa5; REPLY_BYTES])
                    .await
                    .is_err()
                {
                    break;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(body_sizes: Vec<usize>) -> TransportRun {
        TransportRun {
            body_sizes,
            exchanges: 20,
            warmup: 2,
            rounds: 1,
        }
    }

    #[test]
    fn every_transport_answers_every_exchange_at_every_size() {
        let table = run(&small(vec![128, 70_000])).expect("the run completes");
        let text = table.render();
        for transport in Transport::ALL {
            for size in ["128 B", "70000 B"] {
                let row = format!("| {} | {size} | 20 |", transport.name());
                assert!(text.contains(&row), "no row {row:?} in\n{text}");
            }
        }
    }

    #[test]
    fn a_run_without_exchanges_rounds_or_sizes_or_above_the_frame_bound_is_refused() {
        for params in [
            TransportRun {
                exchanges: 0,
                ..small(vec![128])
            },
            TransportRun {
                rounds: 0,
                ..small(vec![128])
            },
            small(Vec::new()),
            small(vec![MAX_FRAME_BYTES + 1]),
        ] {
            assert!(run(&params).is_err(), "{params:?} was accepted");
        }
    }

    #[tokio::test]
    async fn a_frame_announcing_more_than_the_bound_is_refused_before_it_is_read() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let sender = tokio::spawn(async move {
            let mut stream = TcpStream::connect(address).await.unwrap();
            let announced = u32::try_from(MAX_FRAME_BYTES + 1).unwrap();
            // Closed after the length: without the bound, the reader fails at end of stream.
            stream.write_all(&announced.to_be_bytes()).await.unwrap();
        });
        let (mut stream, _) = listener.accept().await.unwrap();
        let error = read_frame(&mut stream)
            .await
            .expect_err("the frame is refused");
        assert!(error.to_string().contains("above the bound"), "{error}");
        sender.await.unwrap();
    }
}
