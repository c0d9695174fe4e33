//! `leasehold-kv`: the example key-value service (docs/FENCING.md).
//!
//! - `leasehold-kv --managers URL,... --listen HOST:PORT --store-dir DIR [executor flags]`
//!   serves: an executor (the library, embedded) with `PUT`/`GET /kv/{key}`, `GET /stats` and
//!   `GET /metrics` on its listener. `DIR` is shared by every process of the service.
//! - `leasehold-kv put --managers URL,... KEY VALUE` and `leasehold-kv get --managers URL,... KEY`
//!   send one request to the key's owner through the routing client and print the reply as JSON;
//!   `get --read-from secondary|secondary-preferred|primary-preferred` reads from a warm
//!   secondary instead (PROTOCOL P19.5) where the namespace has replicas.
//! - `--secondary-refresh DURATION` (default 200ms): how often each shard held as a secondary
//!   fetches what changed in the store (examples/kv/README.md, "Replicas").
//! - `--namespace NAME` (PROTOCOL P18.1), on the service and the client alike, runs the service
//!   in a namespace of its own: its executors register into it and its keys route by its shards.
//!
//! Exit status: 0 on success, 2 when the configuration is refused, 4 when `get` finds no value,
//! 1 otherwise.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use leasehold_api::process::{config_error, init_tracing, run_error, shutdown_signal, LogFormat};
use leasehold_api::routing::{ReadFrom, RoutingConfig};
use leasehold_example_kv::{CopyConfig, KvClient, KvService, ShardStore, WriteDelay};
use leasehold_executor::{metrics, Executor, ExecutorArgs, RunState};
use metrics_exporter_prometheus::PrometheusBuilder;

const PROGRAM: &str = "leasehold-kv";

/// Exit status of `get` for a key never written.
const EXIT_NOT_FOUND: u8 = 4;

#[derive(Debug, Parser)]
#[command(
    name = "leasehold-kv",
    version,
    about = "Example: a sharded key-value service on the Leasehold executor library, every write fenced by its shard's epoch",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

/// Serving: the executor's flags (PROTOCOL §10, §13) plus the store.
#[derive(Debug, Args)]
struct ServeArgs {
    #[command(flatten)]
    executor: ExecutorArgs,

    /// The directory of the shard files, shared by every process of the service.
    #[arg(long, env = "LEASEHOLD_KV_STORE_DIR", required = true)]
    store_dir: Option<PathBuf>,

    /// How often each shard this process holds as a secondary fetches what changed in the store
    /// since its copy's position (e.g. `200ms`): about how stale a secondary read can be.
    #[arg(
        long,
        env = "LEASEHOLD_KV_SECONDARY_REFRESH",
        default_value = "200ms",
        value_parser = parse_refresh
    )]
    secondary_refresh: Duration,

    /// Tests only: hold each admitted write this long between the ownership check and the
    /// store transaction, so a test can pause the process with a write in flight.
    #[arg(long, hide = true, value_parser = humantime::parse_duration)]
    test_write_delay: Option<Duration>,

    /// Tests only: apply `--test-write-delay` to keys with this prefix (default: every key).
    #[arg(long, hide = true, default_value = "")]
    test_write_delay_prefix: String,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write KEY = VALUE at the key's owner; prints the shard and epoch it was stored at.
    Put {
        #[command(flatten)]
        client: ClientArgs,
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// Read KEY from the key's owner (or a secondary: `--read-from`); prints the value and the
    /// epoch it was written at, and from a secondary its role and how fresh its copy was.
    Get {
        #[command(flatten)]
        client: ClientArgs,
        /// Which replica to read from (PROTOCOL P19.5): a secondary serves from a warm copy, as
        /// fresh as the reply's `copy` says.
        #[arg(long, value_enum, default_value_t = ReadFromArg::Primary)]
        read_from: ReadFromArg,
        /// The key.
        key: String,
    },
}

/// `--read-from`: the routing client's [`ReadFrom`], by its kebab-case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ReadFromArg {
    /// The owner only.
    Primary,
    /// The owner, else a ready secondary.
    PrimaryPreferred,
    /// A ready secondary only.
    Secondary,
    /// A ready secondary, else the owner.
    SecondaryPreferred,
}

impl From<ReadFromArg> for ReadFrom {
    fn from(arg: ReadFromArg) -> Self {
        match arg {
            ReadFromArg::Primary => ReadFrom::Primary,
            ReadFromArg::PrimaryPreferred => ReadFrom::PrimaryPreferred,
            ReadFromArg::Secondary => ReadFrom::Secondary,
            ReadFromArg::SecondaryPreferred => ReadFrom::SecondaryPreferred,
        }
    }
}

/// Shortest refresh accepted: below it the refreshes would be the store's main load.
const MIN_SECONDARY_REFRESH: Duration = Duration::from_millis(10);
/// Longest refresh accepted: a copy older than this serves reads too stale to be of use.
const MAX_SECONDARY_REFRESH: Duration = Duration::from_secs(3600);

fn parse_refresh(text: &str) -> Result<Duration, String> {
    let refresh = humantime::parse_duration(text).map_err(|error| error.to_string())?;
    if (MIN_SECONDARY_REFRESH..=MAX_SECONDARY_REFRESH).contains(&refresh) {
        Ok(refresh)
    } else {
        Err(format!(
            "{text} is outside {}..={}",
            humantime::format_duration(MIN_SECONDARY_REFRESH),
            humantime::format_duration(MAX_SECONDARY_REFRESH)
        ))
    }
}

#[derive(Debug, Args)]
struct ClientArgs {
    /// Manager base URLs, comma-separated.
    #[arg(
        long,
        env = "LEASEHOLD_MANAGERS",
        value_delimiter = ',',
        required = true
    )]
    managers: Vec<String>,

    /// The namespace whose keys are routed (PROTOCOL P18.1): the one the service's executors
    /// registered into with `--namespace`.
    #[arg(long, env = "LEASEHOLD_NAMESPACE", default_value = leasehold_api::wire::DEFAULT_NAMESPACE)]
    namespace: String,

    /// Bound on one request to an executor, e.g. `5s`.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(command) => {
            init_tracing(LogFormat::Text, "warn");
            match run_client(command).await {
                Ok(code) => code,
                Err(error) => run_error(PROGRAM, error.as_ref()),
            }
        }
        None => serve(cli.serve).await,
    }
}

async fn serve(args: ServeArgs) -> ExitCode {
    init_tracing(args.executor.log_format, "info");
    // clap requires it when serving; this only restates it for the type system.
    let Some(store_dir) = args.store_dir else {
        return config_error(PROGRAM, &std::io::Error::other("--store-dir is required"));
    };
    let config = match args.executor.config() {
        Ok(config) => config,
        Err(error) => return config_error(PROGRAM, &error),
    };
    let store = match ShardStore::open(&store_dir) {
        Ok(store) => Arc::new(store),
        Err(error) => return run_error(PROGRAM, &error),
    };
    let write_delay = args.test_write_delay.map(|delay| {
        tracing::warn!(delay_ms = delay.as_millis() as u64, prefix = %args.test_write_delay_prefix, "test write delay on: admitted writes are held before the store");
        WriteDelay {
            prefix: args.test_write_delay_prefix.clone(),
            delay,
        }
    });
    let prometheus = match PrometheusBuilder::new().install_recorder() {
        Ok(prometheus) => prometheus,
        Err(error) => return run_error(PROGRAM, &error),
    };
    let mut service = None;
    let started = Executor::start_with_routes(config, |handle| {
        let kv = KvService::new(handle.clone(), Arc::clone(&store), write_delay);
        let routes = kv
            .router()
            .merge(metrics::router(handle.clone(), prometheus));
        service = Some(kv);
        routes
    })
    .await;
    let executor = match started {
        Ok(executor) => executor,
        Err(error) if error.is_config_error() => return config_error(PROGRAM, &error),
        Err(error) => return run_error(PROGRAM, &error),
    };
    // The routes were built, so the service exists; its two tasks (the raise on arrival, the
    // secondaries' copies) run until exit.
    let copies = CopyConfig {
        refresh: args.secondary_refresh,
        ..CopyConfig::default()
    };
    let tasks: Vec<_> = service
        .into_iter()
        .flat_map(|kv| {
            [
                tokio::spawn(kv.clone().raise_on_arrival()),
                tokio::spawn(kv.keep_secondaries(copies)),
            ]
        })
        .collect();
    tracing::info!(store_dir = %store_dir.display(), address = executor.advertised_address(), "serving the key-value service");
    let outcome = executor.run_until(shutdown_signal()).await;
    for task in tasks {
        task.abort();
    }
    match outcome {
        RunState::Stopped | RunState::Running => ExitCode::SUCCESS,
        RunState::Failed(reason) => {
            tracing::error!(%reason, "executor failed");
            ExitCode::FAILURE
        }
    }
}

async fn run_client(command: Command) -> anyhow::Result<ExitCode> {
    let (client_args, key) = match &command {
        Command::Put { client, key, .. } | Command::Get { client, key, .. } => (client, key),
    };
    let config = RoutingConfig {
        namespace: client_args.namespace.clone(),
        // One request: no watcher; a stale table is refreshed on a 421.
        follow: false,
        executor_timeout: client_args.timeout,
        ..RoutingConfig::default()
    };
    let client = KvClient::connect(client_args.managers.clone(), config)
        .await
        .context("loading the routing table")?;
    let printed = match &command {
        Command::Put { value, .. } => {
            let reply = client.put(key, value).await.context("put")?;
            serde_json::to_string(&reply)?
        }
        Command::Get { read_from, .. } => match client
            .get_from(key, (*read_from).into())
            .await
            .context("get")?
        {
            Some(reply) => serde_json::to_string(&reply)?,
            None => {
                eprintln!("{PROGRAM}: no value for key {key:?}");
                return Ok(ExitCode::from(EXIT_NOT_FOUND));
            }
        },
    };
    writeln!(std::io::stdout().lock(), "{printed}").context("writing to stdout")?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serving_takes_the_executor_flags_and_the_store() {
        let cli = Cli::try_parse_from([
            "leasehold-kv",
            "--managers",
            "http://127.0.0.1:1,http://127.0.0.1:2",
            "--listen",
            "127.0.0.1:0",
            "--store-dir",
            "/tmp/kv",
            "--name",
            "a",
            "--event-log",
            "/tmp/a.jsonl",
            "--shutdown-grace",
            "5s",
            "--test-write-delay",
            "2s",
        ])
        .unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.serve.executor.managers.len(), 2);
        assert_eq!(cli.serve.test_write_delay, Some(Duration::from_secs(2)));
        assert_eq!(cli.serve.test_write_delay_prefix, "");
        assert_eq!(cli.serve.secondary_refresh, Duration::from_millis(200));
        assert!(Cli::try_parse_from(["leasehold-kv", "--listen", "127.0.0.1:0"]).is_err());
        let serve = |refresh: &str| {
            Cli::try_parse_from([
                "leasehold-kv",
                "--managers",
                "http://127.0.0.1:1",
                "--listen",
                "127.0.0.1:0",
                "--store-dir",
                "/tmp/kv",
                "--secondary-refresh",
                refresh,
            ])
        };
        assert_eq!(
            serve("50ms").unwrap().serve.secondary_refresh,
            Duration::from_millis(50)
        );
        assert!(serve("0s").is_err(), "a refresh of 0 would spin");
        assert!(serve("2h").is_err());
    }

    #[test]
    fn the_client_subcommands_need_no_serving_flags() {
        let cli = Cli::try_parse_from([
            "leasehold-kv",
            "put",
            "--managers",
            "http://127.0.0.1:1",
            "user-42",
            "hello",
        ])
        .unwrap();
        assert!(
            matches!(cli.command, Some(Command::Put { ref key, ref value, .. }) if key == "user-42" && value == "hello")
        );
        let cli =
            Cli::try_parse_from(["leasehold-kv", "get", "--managers", "http://h:1", "k"]).unwrap();
        assert!(
            matches!(cli.command, Some(Command::Get { ref client, .. }) if client.namespace == "default")
        );
        let cli = Cli::try_parse_from([
            "leasehold-kv",
            "get",
            "--managers",
            "http://h:1",
            "--namespace",
            "orders",
            "k",
        ])
        .unwrap();
        assert!(
            matches!(cli.command, Some(Command::Get { ref client, .. }) if client.namespace == "orders")
        );
        for (flag, wanted) in [
            ("primary", ReadFrom::Primary),
            ("primary-preferred", ReadFrom::PrimaryPreferred),
            ("secondary", ReadFrom::Secondary),
            ("secondary-preferred", ReadFrom::SecondaryPreferred),
        ] {
            let cli = Cli::try_parse_from([
                "leasehold-kv",
                "get",
                "--managers",
                "http://h:1",
                "--read-from",
                flag,
                "k",
            ])
            .unwrap();
            assert!(
                matches!(cli.command, Some(Command::Get { read_from, .. }) if ReadFrom::from(read_from) == wanted),
                "{flag}"
            );
        }
        assert!(Cli::try_parse_from([
            "leasehold-kv",
            "get",
            "--managers",
            "http://h:1",
            "--read-from",
            "nearest",
            "k"
        ])
        .is_err());
    }
}
