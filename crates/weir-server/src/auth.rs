//! Client authentication: trust, or SCRAM-SHA-256 with one user and
//! password (pgwire's SASL handler), and the cancel-key registration every
//! connection needs.

use std::fmt::Debug;
use std::net::IpAddr;
use std::sync::Arc;

use async_trait::async_trait;
use futures::Sink;
use pgwire::api::auth::sasl::scram::{gen_salted_password, random_nonce, ScramAuth};
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::{
    finish_authentication, protocol_negotiation, save_startup_parameters_to_metadata, AuthSource,
    DefaultServerParameterProvider, LoginInfo, Password, StartupHandler,
};
use pgwire::api::{
    ClientInfo, ConnectionHandle, ConnectionManager, PidSecretKeyGenerator,
    RandomPidSecretKeyGenerator,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};

use crate::session::PG_VERSION;

/// How clients authenticate.
#[derive(Debug, Clone)]
pub enum Auth {
    /// No password: clients connect as anyone, from loopback only unless
    /// `remote` (like PostgreSQL's default access rules, which trust local
    /// connections and refuse others).
    Trust {
        /// Trust clients on other hosts too (`--trust-remote-clients`).
        remote: bool,
    },
    /// SCRAM-SHA-256 with one user and password.
    Password {
        /// The user name.
        user: String,
        /// The password.
        password: String,
    },
}

/// The startup handler for `auth`.
pub(crate) fn startup_handler(auth: &Auth, connections: &Arc<ConnectionManager>) -> Startup {
    match auth {
        Auth::Trust { remote } => Startup::Trust(TrustStartup {
            connections: connections.clone(),
            remote: *remote,
        }),
        Auth::Password { user, password } => {
            let source = Arc::new(PasswordSource {
                user: user.clone(),
                password: password.clone(),
            });
            Startup::Scram(Box::new(
                SASLAuthStartupHandler::new(Arc::new(server_parameters()))
                    .with_scram(ScramAuth::new(source))
                    .with_connection_manager(connections.clone()),
            ))
        }
    }
}

fn server_parameters() -> DefaultServerParameterProvider {
    let mut params = DefaultServerParameterProvider::default();
    params.server_version = PG_VERSION.to_owned();
    params.time_zone = "UTC".to_owned();
    params.date_style = "ISO, MDY".to_owned();
    params
}

/// Startup without a password.
pub(crate) struct TrustStartup {
    connections: Arc<ConnectionManager>,
    remote: bool,
}

/// Whether a client at `peer` may connect without a password.
pub fn trusted(peer: IpAddr, remote: bool) -> bool {
    remote || peer.to_canonical().is_loopback()
}

/// The error of a client that may not connect without a password
/// (PostgreSQL's 28000, which ends the connection).
fn refused(peer: IpAddr) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "FATAL".into(),
        "28000".into(),
        format!(
            "connection from host \"{peer}\" refused: without a password Weir accepts \
             only loopback clients; start the server with --password, or with \
             --trust-remote-clients to trust every client"
        ),
    )))
}

/// The startup handler of a connection.
pub(crate) enum Startup {
    Trust(TrustStartup),
    Scram(Box<SASLAuthStartupHandler<DefaultServerParameterProvider>>),
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match self {
            Startup::Scram(handler) => handler.on_startup(client, message).await,
            Startup::Trust(trust) => {
                if let PgWireFrontendMessage::Startup(ref startup) = message {
                    let peer = client.socket_addr().ip();
                    if !trusted(peer, trust.remote) {
                        tracing::warn!(%peer, "refused a client from another host: no password is set");
                        return Err(refused(peer));
                    }
                    protocol_negotiation(client, startup).await?;
                    save_startup_parameters_to_metadata(client, startup);
                    let (pid, secret) = RandomPidSecretKeyGenerator::default().generate(client);
                    client.set_pid_and_secret_key(pid, secret.clone());
                    let (handle, guard) = trust.connections.register(pid, secret);
                    client
                        .session_extensions()
                        .insert::<Arc<ConnectionHandle>>(handle);
                    client.session_extensions().insert(guard);
                    finish_authentication(client, &server_parameters()).await?;
                }
                Ok(())
            }
        }
    }
}

#[derive(Debug)]
struct PasswordSource {
    user: String,
    password: String,
}

#[async_trait]
impl AuthSource for PasswordSource {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        if login.user() != Some(self.user.as_str()) {
            return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                "FATAL".into(),
                "28P01".into(),
                format!(
                    "password authentication failed for user \"{}\"",
                    login.user().unwrap_or("")
                ),
            ))));
        }
        // pgwire's random nonce (18 random bytes, base64) serves as a
        // fresh salt for every login.
        let salt = random_nonce().into_bytes();
        let hash = gen_salted_password(&self.password, &salt, 4096);
        Ok(Password::new(Some(salt), hash))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_password_only_loopback_is_trusted() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(trusted(ip("127.0.0.1"), false));
        assert!(trusted(ip("127.8.9.1"), false));
        assert!(trusted(ip("::1"), false));
        assert!(trusted(ip("::ffff:127.0.0.1"), false));
        assert!(!trusted(ip("10.0.0.5"), false));
        assert!(!trusted(ip("::ffff:192.168.1.2"), false));
        assert!(!trusted(ip("2001:db8::1"), false));
        assert!(trusted(ip("10.0.0.5"), true));
    }
}
