//! The listener: accepts connections until shutdown.

use std::sync::Arc;

use pgwire::api::ConnectionManager;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::database::Database;
use crate::handler::{Auth, ConnectionHandlers, Shared};

/// Serves PostgreSQL clients on `listener` until `shutdown` turns true.
/// Each connection runs in its own task; a failing connection never
/// affects the others.
pub async fn serve(
    db: Arc<Database>,
    listener: TcpListener,
    auth: Auth,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let shared = Arc::new(Shared {
        db,
        connections: Arc::new(ConnectionManager::new()),
        auth,
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
                tokio::spawn(async move {
                    if let Err(e) = pgwire::tokio::process_socket(socket, None, handlers).await {
                        debug!(%peer, error = %e, "connection closed with an error");
                    }
                });
            }
            _ = shutdown.changed() => return Ok(()),
        }
    }
}
