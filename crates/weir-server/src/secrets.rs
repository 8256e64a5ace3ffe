//! `CREATE SECRET` / `DROP SECRET`, and the connector options that name a
//! secret (`password = SECRET pg_password`).
//!
//! A secret's value is sealed with AES-256-GCM (`ring`) under the
//! server's secret key before it enters the catalog, with the secret's
//! name as associated data; the catalog (and so every manifest in the
//! state store, S3 included) holds only the nonce and the sealed bytes.
//! The key is a file outside the state store (`--secret-key-file`,
//! default `<data-dir>/secret.key`), made with 32 random bytes at the
//! first `CREATE SECRET`. Connector options keep the reference; a
//! connector gets the value when it connects ([`resolve`]).

use std::io::Write;
use std::path::Path;

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use weir_sql::{CreateSecret, DropSecret};

use crate::catalog::Catalog;
use crate::database::Database;
use crate::error::{SqlState, WeirError, WeirResult};
use crate::session::{Output, Session};

/// A secret as the catalog keeps it: sealed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretDef {
    /// The AES-GCM nonce, hex.
    pub nonce: String,
    /// The sealed value and its tag, hex.
    pub sealed: String,
}

/// `CREATE SECRET`.
pub async fn create_secret(session: &mut Session, create: &CreateSecret) -> WeirResult<Output> {
    let db = session.db.clone();
    let key = load_key(db.secret_key_file()?, true)?;
    let mut working = db.working().await;
    if working.catalog.secrets.contains_key(&create.name) {
        if create.if_not_exists {
            session.notice(format!(
                "secret \"{}\" already exists, skipping",
                create.name
            ));
            return Ok(Output::command("CREATE SECRET"));
        }
        return Err(WeirError::new(
            SqlState("42710"),
            format!("secret \"{}\" already exists", create.name),
        ));
    }
    let sealed = seal(&key, &create.name, create.value.0.as_bytes())?;
    working.catalog.secrets.insert(create.name.clone(), sealed);
    working.catalog_changed();
    let epoch = working.epoch;
    drop(working);
    db.wait_committed(epoch).await?;
    Ok(Output::command("CREATE SECRET"))
}

/// `DROP SECRET`: refused while a sink, table or source names the secret.
pub async fn drop_secret(session: &mut Session, request: &DropSecret) -> WeirResult<Output> {
    let db = session.db.clone();
    let mut working = db.working().await;
    for name in &request.names {
        if !working.catalog.secrets.contains_key(name) {
            if request.if_exists {
                session.notice(format!("secret \"{name}\" does not exist, skipping"));
                continue;
            }
            return Err(missing(name));
        }
        if let Some(user) = users(&working.catalog, name).next() {
            return Err(WeirError::new(
                SqlState("2BP01"),
                format!("cannot drop secret {name} because {user} uses it"),
            ));
        }
    }
    for name in &request.names {
        working.catalog.secrets.remove(name);
    }
    working.catalog_changed();
    let epoch = working.epoch;
    drop(working);
    db.wait_committed(epoch).await?;
    Ok(Output::command("DROP SECRET"))
}

/// The tables, sinks and sources whose options name secret `name`.
fn users<'a>(catalog: &'a Catalog, name: &'a str) -> impl Iterator<Item = String> + 'a {
    let names_it =
        move |options: &[(String, String)]| names_secret(options.iter().map(|(k, v)| (k, v)), name);
    let tables = catalog
        .tables
        .values()
        .filter(move |t| t.connector.as_ref().is_some_and(|c| names_it(&c.options)))
        .map(|t| format!("table {}", t.name));
    let sinks = catalog
        .materialized_views
        .values()
        .filter(move |v| v.sink.as_ref().is_some_and(|c| names_it(&c.options)))
        .map(|v| format!("sink {}", v.name));
    let sources = catalog
        .sources
        .values()
        .filter(move |s| names_secret(&s.options, name))
        .map(|s| format!("source {}", s.name));
    tables.chain(sinks).chain(sources)
}

/// Whether `options` reference secret `name`.
fn names_secret<'a>(
    options: impl IntoIterator<Item = (&'a String, &'a String)>,
    name: &str,
) -> bool {
    options
        .into_iter()
        .any(|(k, v)| weir_sql::referenced_key(k).is_some() && v == name)
}

/// `options` with each secret reference (`key = SECRET name`) replaced by
/// the secret's value, for a connector to connect with.
pub fn resolve(
    db: &Database,
    catalog: &Catalog,
    options: &[(String, String)],
) -> WeirResult<Vec<(String, String)>> {
    let mut key = None;
    options
        .iter()
        .map(|(k, v)| match weir_sql::referenced_key(k) {
            None => Ok((k.clone(), v.clone())),
            Some(option) => {
                let sealed = catalog.secrets.get(v).ok_or_else(|| missing(v))?;
                if key.is_none() {
                    key = Some(load_key(db.secret_key_file()?, false)?);
                }
                let value = open(key.as_ref().expect("loaded"), v, sealed)?;
                Ok((option.to_owned(), value))
            }
        })
        .collect()
}

/// `options` as a connector reads them, each secret's value left empty:
/// for checking their form where the values are not needed. Fails if a
/// named secret does not exist.
pub fn without_values(
    catalog: &Catalog,
    options: &[(String, String)],
) -> WeirResult<Vec<(String, String)>> {
    options
        .iter()
        .map(|(k, v)| match weir_sql::referenced_key(k) {
            None => Ok((k.clone(), v.clone())),
            Some(_) if !catalog.secrets.contains_key(v) => Err(missing(v)),
            Some(option) => Ok((option.to_owned(), String::new())),
        })
        .collect()
}

fn missing(name: &str) -> WeirError {
    WeirError::new(
        SqlState::UNDEFINED_OBJECT,
        format!("secret \"{name}\" does not exist"),
    )
}

/// The key in `path`; `create`: make the file if there is none.
fn load_key(path: &Path, create: bool) -> WeirResult<LessSafeKey> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => new_key_file(path)?,
        Err(e) => {
            return Err(WeirError::new(
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!("cannot read the secret key file {}: {e}", path.display()),
            )
            .with_hint(
                "Secrets are sealed with the key of the server that created them: start the \
                 server with that --secret-key-file.",
            ))
        }
    };
    let key = UnboundKey::new(&AES_256_GCM, &bytes).map_err(|_| {
        WeirError::new(
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "the secret key file {} does not hold a 32-byte key",
                path.display()
            ),
        )
    })?;
    Ok(LessSafeKey::new(key))
}

/// Writes 32 random bytes to a new file only the server's user reads.
fn new_key_file(path: &Path) -> WeirResult<Vec<u8>> {
    let mut bytes = vec![0u8; 32];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| WeirError::internal("no random bytes for a secret key"))?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(WeirError::internal)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).map_err(|e| {
        WeirError::new(
            SqlState::IO_ERROR,
            format!("cannot create the secret key file {}: {e}", path.display()),
        )
    })?;
    file.write_all(&bytes)
        .and_then(|()| file.sync_all())
        .map_err(WeirError::internal)?;
    Ok(bytes)
}

fn seal(key: &LessSafeKey, name: &str, value: &[u8]) -> WeirResult<SecretDef> {
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| WeirError::internal("no random bytes for a nonce"))?;
    let mut sealed = value.to_vec();
    key.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(name.as_bytes()),
        &mut sealed,
    )
    .map_err(|_| WeirError::internal("sealing a secret failed"))?;
    Ok(SecretDef {
        nonce: hex::encode(nonce),
        sealed: hex::encode(&sealed),
    })
}

fn open(key: &LessSafeKey, name: &str, def: &SecretDef) -> WeirResult<String> {
    let unreadable = || {
        WeirError::new(
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("secret \"{name}\" cannot be opened with this server's secret key"),
        )
    };
    let nonce: [u8; NONCE_LEN] = hex::decode(&def.nonce)
        .ok()
        .and_then(|n| n.try_into().ok())
        .ok_or_else(unreadable)?;
    let mut sealed = hex::decode(&def.sealed).map_err(|_| unreadable())?;
    let value = key
        .open_in_place(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(name.as_bytes()),
            &mut sealed,
        )
        .map_err(|_| unreadable())?;
    String::from_utf8(value.to_vec()).map_err(|_| unreadable())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_secret_opens_only_with_its_key_and_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret.key");
        assert!(load_key(&path, false).is_err(), "no key file yet");
        let key = load_key(&path, true).unwrap();
        let sealed = seal(&key, "pw", b"hunter2").unwrap();
        assert!(!sealed.sealed.contains(&hex::encode(b"hunter2")));
        assert_eq!(
            open(&load_key(&path, false).unwrap(), "pw", &sealed).unwrap(),
            "hunter2"
        );
        assert!(
            open(&key, "other", &sealed).is_err(),
            "the name is bound in"
        );
        let other = dir.path().join("other.key");
        assert!(open(&load_key(&other, true).unwrap(), "pw", &sealed).is_err());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
