//! One connection through the proxy: reading a request, planning its faults from the state,
//! forwarding it and answering.

use super::*;

pub(super) async fn accept_loop(
    listener: TcpListener,
    upstream: Upstream,
    state: Arc<Mutex<ProxyState>>,
    tls: Option<Arc<ProxyTls>>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let (upstream, state, tls) = (upstream.clone(), Arc::clone(&state), tls.clone());
        tokio::spawn(async move {
            let Some(tls) = tls else {
                return serve(client, upstream, None, state).await;
            };
            let Ok(Ok(client)) =
                tokio::time::timeout(IO_TIMEOUT, tls.acceptor.accept(client)).await
            else {
                return;
            };
            let role = client
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|certificate| Role::of_certificate(certificate).ok());
            // A caller whose role the proxy holds no identity for is refused, as the upstream
            // would refuse it.
            if let Some(connector) = role.and_then(|role| tls.connector_for(role)) {
                serve(client, upstream, Some(connector), state).await;
            }
        });
    }
}

/// One HTTP message: the head (request or status line and headers, without the blank line)
/// and the body.
#[derive(Debug)]
pub(super) struct Message {
    pub(super) head: String,
    pub(super) body: Vec<u8>,
}

impl Message {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then_some(value.trim())
        })
    }

    /// The same message with `Connection: close` and `header` values rewritten by `rewrite`.
    pub(super) fn to_bytes(&self, rewrite: impl Fn(&str, &str) -> Option<String>) -> Vec<u8> {
        let mut lines = self.head.lines();
        let mut out = String::new();
        out.push_str(lines.next().unwrap_or_default());
        out.push_str("\r\n");
        for line in lines {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let key = key.trim();
            if key.eq_ignore_ascii_case("connection") || key.eq_ignore_ascii_case("keep-alive") {
                continue;
            }
            let value = rewrite(key, value.trim()).unwrap_or_else(|| value.trim().to_string());
            out.push_str(&format!("{key}: {value}\r\n"));
        }
        out.push_str("Connection: close\r\n\r\n");
        let mut bytes = out.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }
}

/// Reads a head (up to the blank line) and, for a request, a `Content-Length` body; for a
/// reply (`until_eof`), everything up to the end of the stream.
pub(super) async fn read_message(
    stream: &mut (impl AsyncRead + Unpin),
    until_eof: bool,
) -> Result<Message, String> {
    let mut buffer = Vec::new();
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        if buffer.len() > MAX_HEAD_BYTES {
            return Err("head too long".into());
        }
        let mut chunk = [0u8; 4096];
        let read = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if read == 0 {
            return Err("closed before the end of the head".into());
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8(buffer[..head_end].to_vec()).map_err(|e| e.to_string())?;
    let mut body = buffer[head_end + 4..].to_vec();
    let message = Message {
        head,
        body: Vec::new(),
    };
    if until_eof {
        match stream
            .take(MAX_BODY_BYTES as u64)
            .read_to_end(&mut body)
            .await
        {
            Ok(_) => {}
            // A TLS peer that closes without close_notify: the reply still ended there.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
            Err(e) => return Err(e.to_string()),
        }
    } else {
        if message.header("transfer-encoding").is_some() {
            return Err("chunked requests are not supported".into());
        }
        let length: usize = match message.header("content-length") {
            Some(value) => value.parse().map_err(|_| "bad content-length")?,
            None => 0,
        };
        if length > MAX_BODY_BYTES {
            return Err("body too long".into());
        }
        while body.len() < length {
            let mut chunk = vec![0u8; (length - body.len()).min(64 << 10)];
            let read = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
            if read == 0 {
                return Err("closed before the end of the body".into());
            }
            body.extend_from_slice(&chunk[..read]);
        }
        body.truncate(length);
    }
    Ok(Message { body, ..message })
}

/// Sends `request` to `upstream` on a fresh connection (TLS with `connector`) and reads the
/// whole reply.
pub(super) async fn exchange(
    upstream: &Upstream,
    connector: Option<&TlsConnector>,
    request: &[u8],
) -> Result<Message, String> {
    async fn over(
        mut stream: impl AsyncRead + AsyncWriteExt + Unpin,
        request: &[u8],
    ) -> Result<Message, String> {
        stream.write_all(request).await.map_err(|e| e.to_string())?;
        stream.flush().await.map_err(|e| e.to_string())?;
        read_message(&mut stream, true).await
    }
    let attempt = async {
        let stream = TcpStream::connect(&upstream.authority)
            .await
            .map_err(|e| e.to_string())?;
        match connector {
            None => over(stream, request).await,
            Some(connector) => {
                let name =
                    ServerName::try_from(upstream.host.clone()).map_err(|e| e.to_string())?;
                let stream = connector
                    .connect(name, stream)
                    .await
                    .map_err(|e| e.to_string())?;
                over(stream, request).await
            }
        }
    };
    tokio::time::timeout(IO_TIMEOUT, attempt)
        .await
        .map_err(|_| "upstream timed out".to_string())?
}

pub(super) async fn serve(
    mut client: impl AsyncRead + AsyncWriteExt + Unpin,
    upstream: Upstream,
    connector: Option<TlsConnector>,
    state: Arc<Mutex<ProxyState>>,
) {
    let Ok(Ok(request)) = tokio::time::timeout(IO_TIMEOUT, read_message(&mut client, false)).await
    else {
        return;
    };
    let mut request_line = request.head.lines().next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_string();
    let path = request_line.next().unwrap_or_default().to_string();
    let label = format!("{method} {path}");
    let mut plan = lock(&state).plan(&method, &path, &request);
    if let Some(code) = plan.refuse {
        refuse(&mut client, &state, label, code).await;
        return;
    }
    let forwarded = forward(
        &request, &method, &path, &upstream, &connector, &state, &mut plan,
    );
    let Some(reply) = forwarded.await else {
        return;
    };
    answer(&mut client, &state, plan, label, reply, request.body).await;
}

/// Holds, captures, delays and duplicates the request as `plan` says, then sends it upstream;
/// `None` when the upstream gave no reply (counted, and noted on a held reply).
async fn forward(
    request: &Message,
    method: &str,
    path: &str,
    upstream: &Upstream,
    connector: &Option<TlsConnector>,
    state: &Mutex<ProxyState>,
    plan: &mut Plan,
) -> Option<Message> {
    if let Some(released) = plan.hold_request.take() {
        let _ = tokio::time::timeout(HOLD_BOUND, released).await;
        if let Some(held) = lock(state).request_hold.status.as_mut() {
            held.forwarded = true;
        }
    }
    let forwarded = request.to_bytes(|_, _| None);
    lock(state).capture_if_asked(method, path, upstream, connector, &forwarded);
    tokio::time::sleep(plan.request_delay).await;
    if plan.duplicate {
        let (upstream, connector) = (upstream.clone(), connector.clone());
        let copy = forwarded.clone();
        tokio::spawn(async move {
            let _ = exchange(&upstream, connector.as_ref(), &copy).await;
        });
    }
    match exchange(upstream, connector.as_ref(), &forwarded).await {
        Ok(reply) => Some(reply),
        Err(_) => {
            let mut state = lock(state);
            state.stats.upstream_failures += 1;
            if plan.hold.is_some() {
                if let Some(held) = state.reply_hold.status.as_mut() {
                    held.outcome = Some(HoldOutcome::NoReply);
                }
            }
            None
        }
    }
}

/// Drops, rewrites, delays or holds the upstream's reply as `plan` says, then writes it to the
/// caller and notes it once the caller has it whole.
async fn answer(
    client: &mut (impl AsyncRead + AsyncWriteExt + Unpin),
    state: &Mutex<ProxyState>,
    plan: Plan,
    label: String,
    reply: Message,
    request_body: Vec<u8>,
) {
    let rewrites = {
        let mut state = lock(state);
        if plan.drop_reply {
            state.stats.dropped_replies.push(label);
            // The write happened upstream; the client's connection closes unanswered.
            return;
        }
        state.rewrites.clone()
    };
    let bytes = reply.to_bytes(|key, value| {
        key.eq_ignore_ascii_case(LEADER_HEADER)
            .then(|| rewrites.get(value.trim_end_matches('/')).cloned())
            .flatten()
    });
    tokio::time::sleep(plan.reply_delay).await;
    if let Some(released) = plan.hold {
        if let Some(held) = lock(state).reply_hold.status.as_mut() {
            held.reply_body = Some(reply.body.clone());
        }
        let outcome = hold_until_released(client, released).await;
        if let Some(held) = lock(state).reply_hold.status.as_mut() {
            held.outcome = Some(outcome);
        }
        if !matches!(outcome, HoldOutcome::Delivered { .. }) {
            return;
        }
    }
    let written = tokio::time::timeout(IO_TIMEOUT, client.write_all(&bytes)).await;
    let _ = client.shutdown().await;
    if matches!(written, Ok(Ok(()))) {
        lock(state)
            .stats
            .note_answer(label, reply.body, request_body);
    }
}

/// The proxy's state, whatever a panicking holder left it as (every field stays meaningful).
pub(super) fn lock(state: &Mutex<ProxyState>) -> MutexGuard<'_, ProxyState> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Answers the caller the proxy's own refusal `code`, and records it once the caller has it.
pub(super) async fn refuse(
    client: &mut (impl AsyncWriteExt + Unpin),
    state: &Mutex<ProxyState>,
    label: String,
    code: ErrorCode,
) {
    let written = tokio::time::timeout(IO_TIMEOUT, client.write_all(&refused_reply(code))).await;
    let _ = client.shutdown().await;
    if matches!(written, Ok(Ok(()))) {
        let at_ns = crate::checker::monotonic_now_ns();
        lock(state)
            .stats
            .refusals
            .push(Refusal { label, code, at_ns });
    }
}

impl ProxyStats {
    /// A reply the caller got whole: counted, and its body and its request's kept per label.
    pub(super) fn note_answer(
        &mut self,
        label: String,
        reply_body: Vec<u8>,
        request_body: Vec<u8>,
    ) {
        *self.answered.entry(label.clone()).or_default() += 1;
        self.last_reply_body.insert(label.clone(), reply_body);
        self.last_answered_body.insert(label, request_body);
    }
}

impl ProxyState {
    /// What the proxy does with the request `method path` that just arrived: refuse it, hold it
    /// or its reply, drop the reply, delay or duplicate it; recorded in the stats as it arrives.
    pub(super) fn plan(&mut self, method: &str, path: &str, request: &Message) -> Plan {
        let label = format!("{method} {path}");
        self.stats.requests.push(label.clone());
        let arrival_ns = crate::checker::monotonic_now_ns();
        let previous_arrival_ns = self.stats.last_arrival_ns.insert(label, arrival_ns);
        if let Some(credential) = request
            .header("authorization")
            .and_then(|value| value.strip_prefix("Bearer "))
        {
            self.stats.bearer_credentials.insert(credential.to_owned());
        }
        let request_lag = self
            .request_lags
            .iter()
            .filter(|(m, prefix, _)| m == method && path.starts_with(prefix.as_str()))
            .map(|(_, _, lag)| *lag)
            .max()
            .unwrap_or_default();
        let mut plan = Plan {
            reply_delay: self.reply_lag,
            request_delay: request_lag,
            ..Plan::default()
        };
        if let Some((_, code)) = self.refusals.iter().find(|(r, _)| r.matches(method, path)) {
            plan.refuse = Some(*code);
            self.stats.refused += 1;
        } else if let Some(released) = self.request_hold.catch(method, path, || HeldRequest {
            arrival_ns,
            body: request.body.clone(),
            forwarded: false,
        }) {
            plan.hold_request = Some(released);
        } else if let Some(released) = self.reply_hold.catch(method, path, || HeldReply {
            request_arrival_ns: arrival_ns,
            previous_arrival_ns,
            ..HeldReply::default()
        }) {
            plan.hold = Some(released);
        }
        if let Some(at) = self
            .drop_replies
            .iter()
            .position(|d| d.matches(method, path))
        {
            self.drop_replies.remove(at);
            plan.drop_reply = true;
        }
        self.impair(&mut plan);
        plan
    }

    /// The random delays and duplicates of an impaired network, when one is set.
    pub(super) fn impair(&mut self, plan: &mut Plan) {
        let Some(impairment) = self.impairment else {
            return;
        };
        let (low, high) = impairment.delay_ms;
        plan.request_delay += Duration::from_millis(self.rng.random_range(low..=high));
        plan.reply_delay += Duration::from_millis(self.rng.random_range(low..=high));
        plan.duplicate = self.rng.random_range(0..100) < impairment.duplicate_percent;
        if plan.duplicate {
            self.stats.duplicated += 1;
        }
    }

    /// Keeps the forwarded bytes of `method path` when a capture of it was asked for (once, or
    /// each time), with where they went, to be sent again later.
    pub(super) fn capture_if_asked(
        &mut self,
        method: &str,
        path: &str,
        upstream: &Upstream,
        connector: &Option<TlsConnector>,
        forwarded: &[u8],
    ) {
        if !self
            .capture
            .as_ref()
            .is_some_and(|(m, p)| m == method && p == path)
        {
            return;
        }
        if !self.capture_each {
            self.capture = None;
        }
        self.captured = Some(Captured {
            upstream: upstream.clone(),
            connector: connector.clone(),
            request: forwarded.to_vec(),
        });
    }
}

/// Waits for the release of a held reply (or [`HOLD_BOUND`]) while watching whether the caller
/// is still there: a caller that gave up closed its connection, and reading it ends.
pub(super) async fn hold_until_released(
    client: &mut (impl AsyncRead + Unpin),
    released: tokio::sync::oneshot::Receiver<()>,
) -> HoldOutcome {
    let mut scratch = [0u8; 512];
    let bound = tokio::time::sleep(HOLD_BOUND);
    tokio::pin!(bound, released);
    loop {
        tokio::select! {
            _ = &mut released => break,
            () = &mut bound => break,
            read = client.read(&mut scratch) => match read {
                // Bytes after a complete request: not ours to judge; keep holding.
                Ok(read) if read > 0 => {}
                _ => {
                    return HoldOutcome::CallerLeft {
                        at_ns: crate::checker::monotonic_now_ns(),
                    }
                }
            },
        }
    }
    HoldOutcome::Delivered {
        at_ns: crate::checker::monotonic_now_ns(),
    }
}
