//! Session settings for `SET`, `SHOW` and `RESET`.
//!
//! Weir keeps the parameters clients commonly set on connect so that
//! drivers work; the ones that change how values are written out (DateStyle,
//! TimeZone) accept only the values Weir actually produces.

use std::collections::BTreeMap;

use crate::error::{SqlState, WeirError, WeirResult};
use crate::session::PG_VERSION;

/// Parameters and their defaults. Names are case-insensitive.
const DEFAULTS: &[(&str, &str)] = &[
    ("application_name", ""),
    ("client_encoding", "UTF8"),
    ("client_min_messages", "notice"),
    ("datestyle", "ISO, MDY"),
    ("default_transaction_isolation", "read committed"),
    ("default_transaction_read_only", "off"),
    ("extra_float_digits", "1"),
    ("integer_datetimes", "on"),
    ("intervalstyle", "postgres"),
    ("is_superuser", "on"),
    ("lc_messages", "C"),
    ("lock_timeout", "0"),
    ("max_identifier_length", "63"),
    ("search_path", "\"$user\", public"),
    ("server_encoding", "UTF8"),
    ("server_version_num", "160006"),
    ("standard_conforming_strings", "on"),
    ("statement_timeout", "0"),
    ("timezone", "UTC"),
    ("transaction_isolation", "read committed"),
    ("transaction_read_only", "off"),
    ("idle_in_transaction_session_timeout", "0"),
    ("bytea_output", "hex"),
    ("join_collapse_limit", "8"),
    ("geqo", "on"),
    ("jit", "off"),
    ("row_security", "on"),
    ("synchronous_commit", "on"),
];

/// Parameters that only accept the values listed (what Weir produces).
const FIXED: &[(&str, &[&str])] = &[
    ("client_encoding", &["utf8", "utf-8", "unicode"]),
    (
        "timezone",
        &["utc", "etc/utc", "gmt", "z", "+00:00", "0", "zulu"],
    ),
    ("bytea_output", &["hex"]),
    ("intervalstyle", &["postgres"]),
    ("standard_conforming_strings", &["on", "true"]),
];

const READ_ONLY: &[&str] = &[
    "server_version",
    "server_version_num",
    "server_encoding",
    "integer_datetimes",
    "max_identifier_length",
    "is_superuser",
    "lc_messages",
];

/// The values of one session's parameters.
#[derive(Debug, Clone)]
pub struct Settings {
    values: BTreeMap<String, String>,
}

impl Settings {
    /// Defaults for a session of `user`.
    pub fn new(user: &str) -> Self {
        let mut values: BTreeMap<String, String> = DEFAULTS
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        values.insert("server_version".into(), PG_VERSION.into());
        values.insert("session_authorization".into(), user.into());
        Settings { values }
    }

    /// The value of `name`, or 42704 if there is no such parameter.
    pub fn get(&self, name: &str) -> WeirResult<&str> {
        self.values
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
            .ok_or_else(|| unknown(name))
    }

    /// Sets `name` to `value`.
    pub fn set(&mut self, name: &str, value: &str) -> WeirResult<()> {
        let key = name.to_ascii_lowercase();
        if READ_ONLY.contains(&key.as_str()) {
            return Err(WeirError::new(
                SqlState("55P02"),
                format!("parameter \"{name}\" cannot be changed"),
            ));
        }
        if !self.values.contains_key(&key) {
            return Err(unknown(name));
        }
        if let Some((_, allowed)) = FIXED.iter().find(|(k, _)| *k == key) {
            if !allowed.contains(&value.to_ascii_lowercase().as_str()) {
                return Err(WeirError::new(
                    SqlState::INVALID_PARAMETER_VALUE,
                    format!("Weir supports only {} for \"{name}\"", allowed[0]),
                ));
            }
        }
        self.values.insert(key, value.to_owned());
        Ok(())
    }

    /// Restores the default of `name`.
    pub fn reset(&mut self, name: &str) -> WeirResult<()> {
        let key = name.to_ascii_lowercase();
        let default = DEFAULTS
            .iter()
            .find(|(k, _)| *k == key)
            .ok_or_else(|| unknown(name))?;
        self.values.insert(key, default.1.to_owned());
        Ok(())
    }

    /// Every parameter and its value, by name.
    pub fn all(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

fn unknown(name: &str) -> WeirError {
    WeirError::new(
        SqlState::UNDEFINED_OBJECT,
        format!("unrecognized configuration parameter \"{name}\""),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_show_reset() {
        let mut s = Settings::new("weir");
        s.set("application_name", "psql").unwrap();
        assert_eq!(s.get("APPLICATION_NAME").unwrap(), "psql");
        s.reset("application_name").unwrap();
        assert_eq!(s.get("application_name").unwrap(), "");
        assert_eq!(s.set("nope", "1").unwrap_err().code.0, "42704");
        assert_eq!(s.set("server_version", "1").unwrap_err().code.0, "55P02");
        assert_eq!(
            s.set("TimeZone", "Europe/Paris").unwrap_err().code.0,
            "22023"
        );
        s.set("TimeZone", "UTC").unwrap();
    }
}
