//! B2: renewal latency of one holder renewing back to back, each system (docs/BENCHMARKS.md).

use super::*;

/// p50 and p99 of one closed loop, in milliseconds, and its renewals and errors.
#[derive(Debug, Clone, Copy)]
struct Latency {
    ok: u64,
    errors: u64,
    p50_ms: f64,
    p99_ms: f64,
}

/// Holder 0 of `holders` renews back to back for `warmup` (not counted), then for `duration`.
async fn closed_loop_latency<R: Renewer>(
    holders: &R,
    warmup: Duration,
    duration: Duration,
) -> Latency {
    drive::closed_loop(holders, 0, warmup).await;
    let mut samples = drive::closed_loop(holders, 0, duration).await;
    Latency {
        ok: samples.ok(),
        errors: samples.errors,
        p50_ms: samples.quantile_ms(0.5),
        p99_ms: samples.quantile_ms(0.99),
    }
}

/// Each closed loop's renewals before it is measured, not counted.
const B2_WARMUP: Duration = Duration::from_secs(1);

pub async fn b2(env: &Env, duration: Duration) -> Result<Table> {
    let mut rows = leasehold_latencies(env, duration).await?;
    if let Some(etcd) = env.etcd_or_skip("B2") {
        rows.extend(etcd_latencies(env, etcd, duration).await?);
    }
    Ok(b2_table(env, &rows))
}

/// Measurement: Leasehold's closed loop under every transport of the run, each on a fresh
/// cluster.
async fn leasehold_latencies(env: &Env, duration: Duration) -> Result<Vec<Measured<Latency>>> {
    let mut rows = Vec::new();
    for security in env.securities() {
        let work = async {
            let name = format!("b2-leasehold-{}", security.scheme());
            let mut cluster = leasehold_cluster(env, &security, &name, default_flags(1024)).await?;
            let fleet = settled_fleet(&mut cluster, &security, 1, 1024).await?;
            Ok(closed_loop_latency(fleet.as_ref(), B2_WARMUP, duration).await)
        };
        rows.push(measured("Leasehold renew", &security, work).await?);
    }
    Ok(rows)
}

/// Measurement: etcd's put and keepalive closed loops under every transport of the run, one
/// cluster per transport; the puts' rows first, then the keepalives'.
async fn etcd_latencies(
    env: &Env,
    etcd: &Path,
    duration: Duration,
) -> Result<Vec<Measured<Latency>>> {
    let mut etcd_rows = Vec::new();
    for security in env.securities() {
        let name = format!("b2-etcd-{}", security.scheme());
        let cluster = etcd_cluster(etcd, env, &security, &name, Vec::new()).await?;
        let clients = cluster.clients(1, Duration::from_secs(5)).await?;
        let work = async {
            let put =
                EtcdPutFleet::start(clients.clone(), 1, PUT_LEASE_TTL_S, claims_payload(1024))
                    .await?;
            Ok(closed_loop_latency(&put, B2_WARMUP, duration).await)
        };
        etcd_rows.push(measured(ETCD_PUT, &security, work).await?);
        let work = async {
            let keepalive = EtcdKeepAliveFleet::start(clients, 1, 60).await?;
            Ok(closed_loop_latency(&keepalive, B2_WARMUP, duration).await)
        };
        etcd_rows.push(measured(ETCD_KEEPALIVE, &security, work).await?);
    }
    // One system's rows together: plaintext, then TLS.
    etcd_rows.sort_by_key(|row| row.system != ETCD_PUT);
    Ok(etcd_rows)
}

/// Report: one row per closed loop, against etcd's put under the same transport, with TLS's
/// cost when the run compared transports.
fn b2_table(env: &Env, rows: &[Measured<Latency>]) -> Table {
    let mut header = vec![
        "B2",
        "system (one executor, one request at a time)",
        "transport",
        "renewals",
        "errors",
        "p50",
        "p99",
        "÷ etcd put (p50 / p99)",
    ];
    if env.compare_tls {
        header.push("TLS vs plaintext (p50 / p99)");
    }
    header.push("load avg");
    let mut table = Table::new(&header);
    for row in rows {
        let latency = row.result;
        // etcd's put under the same transport as this row.
        let put = Measured::of(rows, ETCD_PUT, row.security.is_tls());
        let mut cells = vec![
            "B2".into(),
            row.system.to_owned(),
            row.security.label().to_owned(),
            latency.ok.to_string(),
            latency.errors.to_string(),
            fmt_ms(latency.p50_ms),
            fmt_ms(latency.p99_ms),
            format!(
                "{} / {}",
                fmt_ratio(Some(latency.p50_ms), put.map(|p| p.p50_ms)),
                fmt_ratio(Some(latency.p99_ms), put.map(|p| p.p99_ms))
            ),
        ];
        if env.compare_tls {
            let plaintext = row.plaintext_of(rows);
            cells.push(format!(
                "{} / {}",
                fmt_change(Some(latency.p50_ms), plaintext.map(|p| p.p50_ms)),
                fmt_change(Some(latency.p99_ms), plaintext.map(|p| p.p99_ms))
            ));
        }
        cells.push(row.load.clone());
        table.row(cells);
    }
    table
}
