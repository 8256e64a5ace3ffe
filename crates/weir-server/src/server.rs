//! The listener: accepts connections until shutdown.

use std::sync::Arc;

use datafusion::execution::memory_pool::GreedyMemoryPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use futures::future::BoxFuture;
use pgwire::api::ConnectionManager;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::auth::Auth;
use crate::database::Database;
use crate::handler::{ConnectionHandlers, Shared};

/// How the server treats clients.
#[derive(Clone)]
pub struct ServeOptions {
    /// Authentication.
    pub auth: Auth,
    /// Memory all queries together may use, in bytes.
    pub query_memory_bytes: usize,
    /// TLS, if clients may ask for it.
    pub tls: Option<pgwire::tokio::TlsAcceptor>,
}

/// Serves PostgreSQL clients on `listener` until `shutdown` turns true.
/// Each connection runs in its own task; a failing connection never
/// affects the others. Queries of all sessions share `query_memory_bytes`
/// for their sorts, joins, aggregations and results. Boxed so that the
/// code of every session is compiled in this crate (see
/// [`Database::open`]).
pub fn serve(
    db: Arc<Database>,
    listener: TcpListener,
    options: ServeOptions,
    shutdown: watch::Receiver<bool>,
) -> BoxFuture<'static, std::io::Result<()>> {
    Box::pin(accept_connections(db, listener, options, shutdown))
}

async fn accept_connections(
    db: Arc<Database>,
    listener: TcpListener,
    options: ServeOptions,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let ServeOptions {
        auth,
        query_memory_bytes,
        tls,
    } = options;
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(GreedyMemoryPool::new(query_memory_bytes)))
        .build_arc()
        .map_err(std::io::Error::other)?;
    crate::mview::restore(&db, runtime.clone())
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(crate::cdc::run_ingests(
        db.clone(),
        runtime.clone(),
        shutdown.clone(),
    ));
    tokio::spawn(crate::file_source::run_listers(
        db.clone(),
        shutdown.clone(),
    ));
    tokio::spawn(crate::dead_letters::run_sweeper(
        db.clone(),
        shutdown.clone(),
    ));
    tokio::spawn(crate::order_builder::run(db.clone(), shutdown.clone()));
    let shared = Arc::new(Shared {
        db,
        connections: Arc::new(ConnectionManager::new()),
        auth,
        runtime,
    });
    info!(address = %listener.local_addr()?, "weir is accepting connections");
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (socket, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        warn!(error = %e, "accept failed");
                        continue;
                    }
                };
                let _ = socket.set_nodelay(true);
                let handlers = Arc::new(ConnectionHandlers::new(shared.clone()));
                let tls = tls.clone();
                tokio::spawn(async move {
                    if let Err(e) = pgwire::tokio::process_socket(socket, tls, handlers).await {
                        debug!(%peer, error = %e, "connection closed with an error");
                    }
                });
            }
            _ = shutdown.changed() => return Ok(()),
        }
    }
}
