//! The `weir` binary: parses flags into a [`Config`], opens the state
//! store, recovers, and serves PostgreSQL clients until SIGTERM or Ctrl-C.

mod config;

use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::info;
use weir_server::{Database, ServeOptions};
use weir_state::StateStore;

use crate::config::{Args, Command, Config};

/// The stack of each runtime thread, where statements are parsed and
/// planned. An expression nests as deep as its terms (`1 + 1 + ... + 1`,
/// a long `OR` chain), and dropping, naming and rewriting it recurse that
/// deep; DataFusion's planner grows its own stack, the rest does not. With
/// the default 2 MiB a 10,000-term expression overflowed it and aborted
/// the process. The stack is reserved address space: pages are only
/// taken as deep statements touch them.
const STATEMENT_STACK_BYTES: usize = 256 << 20;

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    exit_when_timely_fails();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(STATEMENT_STACK_BYTES)
        .build()?;
    match args.command {
        Some(Command::Backup { from, to }) => runtime.block_on(backup(&from, &to)),
        None => {
            let config = Config::from_args(args.serve)?;
            match &config.database.cluster {
                Some(cluster) if cluster.process > 0 => runtime.block_on(compute(
                    config.database.workers,
                    config.database.epoch_read_limit,
                    cluster.clone(),
                )),
                _ => runtime.block_on(run(config)),
            }
        }
    }
}

/// A panic in a timely thread (a worker, or a connection to another
/// process of the cluster) leaves the dataflows unable to progress: the
/// process exits, and is restarted from the last checkpoint with the rest
/// of the cluster, as Flink restarts a job.
fn exit_when_timely_fails() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        let thread = std::thread::current();
        if thread
            .name()
            .is_some_and(|name| name.starts_with("timely:"))
        {
            tracing::error!(
                thread = thread.name().unwrap_or_default(),
                "a timely thread failed; exiting so that the cluster restarts from its last checkpoint"
            );
            std::process::exit(70);
        }
    }));
}

/// A process of a cluster other than 0: its workers' share of the views
/// until process 0 shuts the cluster down.
async fn compute(
    workers: usize,
    epoch_read_limit: usize,
    cluster: weir_stream::runtime::ClusterConfig,
) -> anyhow::Result<()> {
    info!(process = cluster.process, workers, "joining the cluster");
    tokio::task::spawn_blocking(move || {
        weir_server::cluster::serve_process(workers, epoch_read_limit, &cluster)
    })
    .await?
    .context("running the cluster's workers")?;
    info!("the cluster shut down");
    Ok(())
}

/// `weir backup`: copies the newest committed epoch of `from` into `to`.
async fn backup(from: &str, to: &str) -> anyhow::Result<()> {
    let source =
        StateStore::open(from, Default::default()).with_context(|| format!("opening {from}"))?;
    let target =
        StateStore::open(to, Default::default()).with_context(|| format!("opening {to}"))?;
    let epoch = source.backup_to(&target).await.context("copying state")?;
    println!("copied epoch {epoch} from {from} to {to}");
    Ok(())
}

async fn run(config: Config) -> anyhow::Result<()> {
    let store = StateStore::open(&config.state_location, config.store.clone())
        .with_context(|| format!("opening state store {}", config.state_location))?;
    let db = Database::open(store, config.database.clone())
        .await
        .context("recovering state")?;
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("listening on {}", config.listen))?;
    let (stop, stopped) = watch::channel(false);
    let coordinator = tokio::spawn(db.clone().run_coordinator(stopped.clone()));
    let tls = match &config.tls {
        Some((cert, key)) => Some(weir_server::tls::acceptor(cert, key).context("loading TLS")?),
        None => None,
    };
    let options = ServeOptions {
        auth: config.auth.clone(),
        query_memory_bytes: config.query_memory_bytes,
        tls,
    };
    let metrics = match config.metrics_listen {
        Some(address) => {
            let listener = TcpListener::bind(address)
                .await
                .with_context(|| format!("listening for metrics on {address}"))?;
            Some(tokio::spawn(weir_server::metrics::serve(
                db.clone(),
                listener,
                stopped.clone(),
            )))
        }
        None => None,
    };
    let server = tokio::spawn(weir_server::serve(db.clone(), listener, options, stopped));
    shutdown_signal().await;
    info!("shutting down: committing pending changes");
    let _ = stop.send(true);
    server.await??;
    if let Some(metrics) = metrics {
        metrics.await??;
    }
    coordinator.await?;
    drop(Arc::clone(&db));
    info!(epoch = db.committed_epoch(), "stopped");
    Ok(())
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
