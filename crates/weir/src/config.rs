//! Command-line flags (phase one) and the validated settings the server
//! runs with (phase two).

use std::net::SocketAddr;
use std::time::Duration;

use weir_state::StoreConfig;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use weir_server::{Auth, DatabaseConfig};
use weir_stream::runtime::ClusterConfig;

/// Weir: a streaming SQL database that speaks PostgreSQL.
#[derive(Debug, Parser)]
#[command(version, about)]
pub struct Args {
    /// Without a command, `weir` runs the server.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Server flags.
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// Commands other than running the server.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Copies the newest committed state from one store to another; safe
    /// while a server writes to the source. Start a server on the copy
    /// with --data-dir or --state-url.
    Backup {
        /// Source: a local folder or an object store URL.
        #[arg(long)]
        from: String,
        /// Target: a local folder or an object store URL.
        #[arg(long)]
        to: String,
    },
}

/// Flags of the server.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to accept PostgreSQL clients on.
    #[arg(long, default_value = "127.0.0.1:6566")]
    pub listen: String,
    /// Local folder holding the state (used unless --state-url is given).
    #[arg(long, default_value = "./weir-data")]
    pub data_dir: String,
    /// Object store URL for the state instead of --data-dir, e.g.
    /// s3://bucket/prefix (credentials from the usual AWS_* variables).
    #[arg(long)]
    pub state_url: Option<String>,
    /// How often an epoch is committed when no statement is waiting
    /// (e.g. 1s, 250ms), or `off`: epochs only for statements that wait,
    /// FLUSH and CHECKPOINT.
    #[arg(long, default_value = "1s")]
    pub checkpoint_interval: String,
    /// How long a reader of a source with a WATERMARK (each worker's share
    /// of its splits, or an append-only table's changes) may read nothing
    /// before it stops holding back its views' watermark, so that windows
    /// over other inputs still close.
    #[arg(long, default_value = "5s")]
    pub watermark_idle_timeout: String,
    /// How long a write waits for its epoch to commit before failing.
    #[arg(long, default_value = "30s")]
    pub commit_timeout: String,
    /// Memory all queries together may use for sorts, joins, aggregations
    /// and results, in MiB; a query that needs more fails with 54000.
    #[arg(long, default_value_t = 4096)]
    pub query_memory_mb: usize,
    /// Memory each materialized view's state (operators and output) may
    /// hold, in MiB; a view that needs more stops being maintained and its
    /// reads fail with 53200, while the server and other views go on.
    #[arg(long, default_value_t = weir_server::DEFAULT_VIEW_MEMORY_MB)]
    pub view_memory_mb: usize,
    /// How much each source reader reads into one epoch, in MiB of Arrow
    /// data: a reader that reaches it asks for the epoch to be cut early
    /// and waits for the barrier, so that an epoch's rows (held until its
    /// cut) stay bounded when a source outruns the checkpoints.
    #[arg(long, default_value_t = weir_server::DEFAULT_EPOCH_READ_LIMIT_MB)]
    pub epoch_read_limit_mb: usize,
    /// How many timely workers run the views (default: the number of
    /// cores): a view over sources and tables runs as one instance per
    /// worker, partitioned by key; views over other views read each source
    /// with this many readers. It may change between restarts: state is dealt out
    /// again by key and every source split resumes at its own position.
    /// With --cluster it must be given, the same in every process.
    #[arg(long)]
    pub workers: Option<usize>,
    /// Run as one process of a cluster: every process's host:port for
    /// timely's connections, comma-separated, process 0 first. Every
    /// process runs --workers workers and a share of every view over
    /// sources and tables; process 0 serves clients and owns the state
    /// store, the others only compute. Start each with the same list and
    /// its own --process.
    #[arg(long, value_delimiter = ',')]
    pub cluster: Vec<String>,
    /// This process's index in --cluster; 0 is the server.
    #[arg(long, default_value_t = 0)]
    pub process: usize,
    /// Require SCRAM-SHA-256 password authentication with this password.
    #[arg(long, env = "WEIR_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// Serve Prometheus metrics at http://ADDR/metrics (e.g.
    /// 127.0.0.1:9466).
    #[arg(long)]
    pub metrics_listen: Option<String>,
    /// How many recent committed epochs (manifests and the files they
    /// name) the state store keeps; older ones are garbage-collected. A
    /// `SUBSCRIBE ... AS OF epoch` can resume from any epoch kept.
    #[arg(long, default_value_t = 3)]
    pub retained_manifests: usize,
    /// How long older committed epochs are kept too (`30s`, `10m`, `1h`;
    /// `0`: not kept): their manifests and the state objects they name
    /// stay in the store for this long after their commit, so that a
    /// `SUBSCRIBE ... AS OF epoch` can resume from any epoch of that
    /// window. The store grows by what the epochs of the window wrote.
    #[arg(long, default_value = "0")]
    pub retain_history: String,
    /// The key `CREATE SECRET` seals secrets with (32 bytes, made at the
    /// first `CREATE SECRET` if missing); default: `secret.key` in
    /// --data-dir. The state store holds only sealed secrets: keep this
    /// file with the server, also when the state is on S3.
    #[arg(long)]
    pub secret_key_file: Option<std::path::PathBuf>,
    /// PEM certificate chain for TLS (with --tls-key); clients may then
    /// use sslmode=require.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// PEM private key for TLS (with --tls-cert).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Without --password, accept clients from other hosts too (by
    /// default only loopback clients may connect without a password).
    #[arg(long)]
    pub trust_remote_clients: bool,
    /// The user name clients log in as when a password is set.
    #[arg(long, default_value = "weir")]
    pub user: String,
}

/// Validated settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where clients connect.
    pub listen: SocketAddr,
    /// A local folder or an object store URL.
    pub state_location: String,
    /// Epoch timing and the views' memory budget.
    pub database: DatabaseConfig,
    /// Client authentication.
    pub auth: Auth,
    /// Memory for queries, in bytes.
    pub query_memory_bytes: usize,
    /// Certificate and key files for TLS.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// Where to serve Prometheus metrics, if anywhere.
    pub metrics_listen: Option<SocketAddr>,
    /// State store tunables.
    pub store: StoreConfig,
}

impl Config {
    /// Checks the flags and derives the settings.
    pub fn from_args(args: ServeArgs) -> anyhow::Result<Self> {
        let listen: SocketAddr = args
            .listen
            .parse()
            .with_context(|| format!("--listen {}: expected host:port", args.listen))?;
        let auth = match args.password {
            Some(password) if !password.is_empty() => Auth::Password {
                user: args.user,
                password,
            },
            _ => {
                if !listen.ip().is_loopback() {
                    if args.trust_remote_clients {
                        tracing::warn!(
                            "listening on {listen} without a password and trusting remote clients: anyone who can reach it may connect"
                        );
                    } else {
                        tracing::info!(
                            "listening on {listen} without a password: clients from other hosts are refused (set --password, or --trust-remote-clients)"
                        );
                    }
                }
                Auth::Trust {
                    remote: args.trust_remote_clients,
                }
            }
        };
        let workers = match (args.workers, args.cluster.is_empty()) {
            (Some(workers), _) => workers,
            (None, true) => weir_server::default_workers(),
            // Timely numbers workers as if every process ran as many: a
            // default from each machine's cores could differ.
            (None, false) => bail!("--cluster needs --workers, the same in every process"),
        };
        let database = DatabaseConfig {
            checkpoint_interval: match args.checkpoint_interval.trim() {
                "off" => Duration::ZERO,
                text => parse_duration(text).context("--checkpoint-interval")?,
            },
            commit_timeout: parse_duration(&args.commit_timeout).context("--commit-timeout")?,
            view_memory_bytes: args.view_memory_mb << 20,
            epoch_read_limit: args.epoch_read_limit_mb << 20,
            watermark_idle_timeout: parse_duration(&args.watermark_idle_timeout)
                .context("--watermark-idle-timeout")?,
            workers,
            cluster: match args.cluster.len() {
                0 => None,
                1 => bail!("--cluster needs the addresses of at least two processes"),
                _ => Some(ClusterConfig {
                    process: args.process,
                    addresses: args.cluster.clone(),
                }),
            },
            secret_key_file: Some(
                args.secret_key_file
                    .clone()
                    .unwrap_or_else(|| std::path::Path::new(&args.data_dir).join("secret.key")),
            ),
            ..DatabaseConfig::default()
        };
        if args.process >= args.cluster.len().max(1) {
            bail!(
                "--process {} is not an index into --cluster ({} processes)",
                args.process,
                args.cluster.len()
            );
        }
        let metrics_listen = match &args.metrics_listen {
            Some(text) => Some(
                text.parse()
                    .with_context(|| format!("--metrics-listen {text}: expected host:port"))?,
            ),
            None => None,
        };
        if args.query_memory_mb == 0 {
            bail!("--query-memory-mb must be positive");
        }
        if args.view_memory_mb == 0 {
            bail!("--view-memory-mb must be positive");
        }
        if args.epoch_read_limit_mb == 0 {
            bail!("--epoch-read-limit-mb must be positive");
        }
        if workers == 0 {
            bail!("--workers must be at least 1");
        }
        if args.retained_manifests == 0 {
            bail!("--retained-manifests must be at least 1");
        }
        let store = StoreConfig {
            retained_manifests: args.retained_manifests,
            retain_history: match args.retain_history.trim() {
                "0" | "0s" => Duration::ZERO,
                text => parse_duration(text).context("--retain-history")?,
            },
            ..StoreConfig::default()
        };
        Ok(Config {
            query_memory_bytes: args.query_memory_mb << 20,
            tls: args.tls_cert.zip(args.tls_key),
            metrics_listen,
            listen,
            state_location: args.state_url.unwrap_or(args.data_dir),
            database,
            auth,
            store,
        })
    }
}

/// Parses `250ms`, `1s`, `2m`, `1h` or a bare number of seconds.
pub fn parse_duration(text: &str) -> anyhow::Result<Duration> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let value: f64 = number
        .parse()
        .with_context(|| format!("{text}: not a duration"))?;
    let seconds = match unit.trim() {
        "ms" => value / 1000.0,
        "s" => value,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        other => bail!("{text}: unknown unit {other:?} (use ms, s, m or h)"),
    };
    if !(seconds > 0.0 && seconds.is_finite()) {
        bail!("{text}: must be positive");
    }
    Duration::try_from_secs_f64(seconds).with_context(|| format!("{text}: too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("1d").is_err());
        assert!(parse_duration("1e300h").is_err());
        assert!(parse_duration("abc").is_err());
    }

    fn config(flags: &[&str]) -> anyhow::Result<Config> {
        let args = Args::try_parse_from(std::iter::once("weir").chain(flags.iter().copied()))?;
        Config::from_args(args.serve)
    }

    #[test]
    fn cluster_flags() {
        let cluster = config(&["--cluster", "a:1,b:2", "--process", "1", "--workers", "3"])
            .unwrap()
            .database
            .cluster
            .unwrap();
        assert_eq!(cluster.process, 1);
        assert_eq!(cluster.addresses, ["a:1", "b:2"]);
        assert!(config(&["--workers", "2"])
            .unwrap()
            .database
            .cluster
            .is_none());
        let refused = [
            // The workers could differ between machines.
            &["--cluster", "a:1,b:2"][..],
            &["--cluster", "a:1", "--workers", "1"],
            &["--cluster", "a:1,b:2", "--process", "2", "--workers", "1"],
            &["--process", "1", "--workers", "1"],
        ];
        for flags in refused {
            assert!(config(flags).is_err(), "{flags:?}");
        }
    }
}
