//! B1: renewal throughput, each system ramped until its p99 passes the bound (docs/BENCHMARKS.md).

use super::*;

#[derive(Debug, Clone)]
pub struct B1 {
    pub executors: usize,
    pub shards: u32,
    pub ramp: Ramp,
    pub etcd_connections: usize,
    /// Leasehold is also measured with every renewal reporting a load for each shard it
    /// holds (P15.1), beside the same ramp without, to price load reporting (B7).
    pub report_loads: bool,
}

const LEASEHOLD_RENEW: &str = "Leasehold renew";
const LEASEHOLD_RENEW_LOADS: &str = "Leasehold renew, loads reported";

/// The load every shard reports in B1 `--report-loads`: one value for all, so equal executors
/// stay balanced and the planner moves nothing, and the ramp measures what carrying, checking
/// and tracking the reports costs. Not round, so it is encoded as a measured rate would be.
const B1_SHARD_LOAD: f64 = 251.37;
/// One B1 ramp against a fresh Leasehold cluster of its own; with `report_loads`, every
/// renewal carries a load for each shard it claims.
async fn b1_leasehold(
    env: &Env,
    security: &Security,
    args: &B1,
    report_loads: bool,
) -> Result<RampResult> {
    let loads = if report_loads { ", loads reported" } else { "" };
    let label = format!("leasehold, {}{loads}", security.label());
    eprintln!(
        "B1 {label}: {} executors, {} shards",
        args.executors, args.shards
    );
    let name = format!(
        "b1-leasehold-{}{}",
        security.scheme(),
        if report_loads { "-loads" } else { "" }
    );
    let mut cluster = leasehold_cluster(env, security, &name, default_flags(args.shards)).await?;
    let mut spec = FleetSpec::plain(args.executors);
    if report_loads {
        spec.loads = Some(Arc::new(UniformLoad(B1_SHARD_LOAD)));
    }
    let fleet = settled_fleet_spec(&mut cluster, security, spec, args.shards).await?;
    Ok(drive::ramp(fleet, args.ramp, &label).await)
}

/// One B1 ramp against a fresh etcd cluster of its own: `fleet` makes the holders from the
/// cluster's clients.
async fn b1_etcd<F, Fut, R>(
    env: &Env,
    etcd: &Path,
    security: &Security,
    args: &B1,
    system: &str,
    cluster_name: &str,
    fleet: F,
) -> Result<RampResult>
where
    F: FnOnce(Vec<crate::etcd::EtcdClient>) -> Fut,
    Fut: std::future::Future<Output = Result<R>>,
    R: Renewer,
{
    let label = format!("{system}, {}", security.label());
    eprintln!("B1 {label}: {} holders", args.executors);
    let name = format!("{cluster_name}-{}", security.scheme());
    let cluster = etcd_cluster(etcd, env, security, &name, Vec::new()).await?;
    let clients = cluster
        .clients(args.etcd_connections, Duration::from_secs(5))
        .await?;
    let holders = Arc::new(fleet(clients).await?);
    Ok(drive::ramp(holders, args.ramp, &label).await)
}

pub async fn b1(env: &Env, args: &B1) -> Result<Table> {
    let rows = measure_all(env, args).await?;
    Ok(b1_table(env, args, &rows))
}

/// Measurement: every ramp, Leasehold's (with and without loads reported) and then etcd's two
/// shapes, each under every transport of the run.
async fn measure_all(env: &Env, args: &B1) -> Result<Vec<Measured<RampResult>>> {
    let n = args.executors;
    let mut rows: Vec<Measured<RampResult>> = Vec::new();
    for security in env.securities() {
        let work = b1_leasehold(env, &security, args, false);
        rows.push(measured(LEASEHOLD_RENEW, &security, work).await?);
        if args.report_loads {
            let work = b1_leasehold(env, &security, args, true);
            rows.push(measured(LEASEHOLD_RENEW_LOADS, &security, work).await?);
        }
    }
    if let Some(etcd) = env.etcd_or_skip("B1") {
        let value = claims_payload(per_holder_shards(args.shards, n));
        for security in env.securities() {
            let put = |clients| EtcdPutFleet::start(clients, n, PUT_LEASE_TTL_S, value.clone());
            let work = b1_etcd(env, etcd, &security, args, ETCD_PUT, "b1-etcd-put", put);
            rows.push(measured(ETCD_PUT, &security, work).await?);
        }
        for security in env.securities() {
            let keepalive = |clients| EtcdKeepAliveFleet::start(clients, n, 60);
            let work = b1_etcd(
                env,
                etcd,
                &security,
                args,
                ETCD_KEEPALIVE,
                "b1-etcd-keepalive",
                keepalive,
            );
            rows.push(measured(ETCD_KEEPALIVE, &security, work).await?);
        }
    }
    Ok(rows)
}

/// The renewals/s of a ramp's last step within the p99 bound, if any.
fn within(found: &RampResult) -> Option<f64> {
    found.within_bound.as_ref().map(|s| s.achieved_per_s)
}

/// The renewals/s of a ramp's last step that kept up, if any.
fn kept(found: &RampResult) -> Option<f64> {
    found.kept_up.as_ref().map(|s| s.achieved_per_s)
}

/// A ramp's step as the table shows it; without one, below the ramp's start.
fn fmt_step(step: Option<&StepResult>, ramp: &Ramp) -> String {
    match step {
        Some(step) => format!(
            "{} (p50 {}, p99 {})",
            fmt_rate(step.achieved_per_s),
            fmt_ms(step.p50_ms),
            fmt_ms(step.p99_ms)
        ),
        None => format!("< {}", fmt_rate(ramp.start_per_s)),
    }
}

/// Report: one row per ramp, against Leasehold's under the same transport, with the TLS and
/// load-reporting columns when the run measured them.
fn b1_table(env: &Env, args: &B1, rows: &[Measured<RampResult>]) -> Table {
    let bound = format!("renewals/s at p99 ≤ {} ms", args.ramp.p99_bound_ms);
    let mut header = vec![
        "B1",
        "system",
        "transport",
        "executors",
        &bound,
        "Leasehold ÷ this",
        "highest renewals/s kept up",
        "Leasehold ÷ this",
    ];
    if env.compare_tls {
        header.push("TLS vs plaintext (at p99 bound / kept up)");
    }
    if args.report_loads {
        header.push("loads reported vs not (at p99 bound / kept up)");
    }
    header.push("load avg");
    let mut table = Table::new(&header);
    for row in rows {
        table.row(b1_row(env, args, rows, row));
    }
    table
}

/// One ramp's row of [`b1_table`]; `rows` are every ramp's, its baselines among them.
fn b1_row(
    env: &Env,
    args: &B1,
    rows: &[Measured<RampResult>],
    row: &Measured<RampResult>,
) -> Vec<String> {
    // Leasehold under the same transport as this row.
    let ours = Measured::of(rows, LEASEHOLD_RENEW, row.security.is_tls());
    let mut cells = vec![
        "B1".into(),
        row.system.to_owned(),
        row.security.label().to_owned(),
        args.executors.to_string(),
        fmt_step(row.result.within_bound.as_ref(), &args.ramp),
        fmt_ratio(ours.and_then(within), within(&row.result)),
        fmt_step(row.result.kept_up.as_ref(), &args.ramp),
        fmt_ratio(ours.and_then(kept), kept(&row.result)),
    ];
    if env.compare_tls {
        let plaintext = row.plaintext_of(rows);
        cells.push(format!(
            "{} / {}",
            fmt_change(within(&row.result), plaintext.and_then(within)),
            fmt_change(kept(&row.result), plaintext.and_then(kept))
        ));
    }
    if args.report_loads {
        // The same transport's ramp without loads is the baseline of a ramp with them.
        let without = (row.system == LEASEHOLD_RENEW_LOADS)
            .then(|| Measured::of(rows, LEASEHOLD_RENEW, row.security.is_tls()))
            .flatten();
        cells.push(format!(
            "{} / {}",
            fmt_change(
                without.map(|_| &row.result).and_then(within),
                without.and_then(within)
            ),
            fmt_change(
                without.map(|_| &row.result).and_then(kept),
                without.and_then(kept)
            )
        ));
    }
    cells.push(row.load.clone());
    cells
}
