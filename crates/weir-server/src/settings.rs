//! Session settings for `SET`, `SHOW` and `RESET`.
//!
//! Weir keeps the parameters clients commonly set on connect so that
//! drivers work; the ones that change how values are written out
//! (DateStyle, IntervalStyle) accept only the values Weir actually
//! produces. TimeZone takes any zone (`time_zone.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{SqlState, WeirError, WeirResult};
use crate::session::PG_VERSION;

/// Parameters and their defaults. Names are case-insensitive.
const DEFAULTS: &[(&str, &str)] = &[
    ("application_name", ""),
    ("client_encoding", "UTF8"),
    ("client_min_messages", "notice"),
    ("datestyle", "ISO, MDY"),
    ("default_table_access_method", "heap"),
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

/// Parameters that hold a duration (milliseconds unless a unit is given;
/// 0 turns them off).
const DURATIONS: &[&str] = &[
    "statement_timeout",
    "idle_in_transaction_session_timeout",
    "lock_timeout",
];

/// A duration as PostgreSQL reads these parameters: `250`, `250ms`,
/// `5s`, `2min`, `1h`, `1d` (a bare number is milliseconds).
pub fn parse_duration(text: &str) -> Option<std::time::Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let millis = match unit.trim() {
        "" | "ms" => 1.0,
        "s" => 1e3,
        "min" => 60e3,
        "h" => 3600e3,
        "d" => 86400e3,
        _ => return None,
    };
    let millis = number * millis;
    (0.0..1e15)
        .contains(&millis)
        .then(|| std::time::Duration::from_secs_f64(millis / 1e3))
}

/// The values of one session's parameters.
///
/// As in PostgreSQL, settings are transactional: a transaction block that
/// rolls back restores every parameter it changed, and one that commits
/// restores those it changed with `SET LOCAL`.
#[derive(Debug, Clone)]
pub struct Settings {
    values: BTreeMap<String, String>,
    /// Inside a block: the values at its start.
    at_block_start: Option<BTreeMap<String, String>>,
    /// Inside a block: the parameters it changed with `SET LOCAL`.
    local: BTreeSet<String>,
}

/// One session's settings, shared with the functions that read and set
/// them (`current_setting`, `set_config`).
pub type SharedSettings = Arc<Mutex<Settings>>;

impl Settings {
    /// Defaults for a session of `user`.
    pub fn new(user: &str) -> Self {
        let mut values: BTreeMap<String, String> = DEFAULTS
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        values.insert("server_version".into(), PG_VERSION.into());
        values.insert("session_authorization".into(), user.into());
        Settings {
            values,
            at_block_start: None,
            local: BTreeSet::new(),
        }
    }

    /// A transaction block starts.
    pub fn begin_block(&mut self) {
        self.at_block_start = Some(self.values.clone());
        self.local.clear();
    }

    /// The block ends: a rollback restores every parameter, a commit the
    /// ones set with `SET LOCAL`.
    pub fn end_block(&mut self, committed: bool) {
        let Some(start) = self.at_block_start.take() else {
            return;
        };
        if committed {
            for name in std::mem::take(&mut self.local) {
                if let Some(value) = start.get(&name) {
                    self.values.insert(name, value.clone());
                }
            }
        } else {
            self.values = start;
            self.local.clear();
        }
    }

    /// `SET LOCAL`: sets `name` until the block ends. Outside a block it
    /// does nothing and returns false (PostgreSQL warns).
    pub fn set_local(&mut self, name: &str, value: &str) -> WeirResult<bool> {
        if self.at_block_start.is_none() {
            // Still check the name and value.
            self.checked_key(name, value)?;
            return Ok(false);
        }
        self.set(name, value)?;
        self.local.insert(name.to_ascii_lowercase());
        Ok(true)
    }

    /// The value of `name`, or 42704 if there is no such parameter.
    pub fn get(&self, name: &str) -> WeirResult<&str> {
        self.values
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
            .ok_or_else(|| unknown(name))
    }

    /// Sets `name` to `value` (a time zone as `SHOW` prints it).
    pub fn set(&mut self, name: &str, value: &str) -> WeirResult<()> {
        let key = self.checked_key(name, value)?;
        let value = match key.as_str() {
            "timezone" => zone(value)?.shown,
            _ => value.to_owned(),
        };
        self.values.insert(key, value);
        Ok(())
    }

    /// The session's time zone as Arrow names it (`Europe/Paris`,
    /// `-07:00`).
    pub fn arrow_time_zone(&self) -> String {
        self.values
            .get("timezone")
            .and_then(|value| crate::time_zone::parse(value))
            .map_or_else(|| "UTC".to_owned(), |zone| zone.arrow)
    }

    /// The key of parameter `name`, once `value` is known to be one it may
    /// take.
    fn checked_key(&self, name: &str, value: &str) -> WeirResult<String> {
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
        if key == "timezone" {
            zone(value)?;
        }
        if DURATIONS.contains(&key.as_str()) && parse_duration(value).is_none() {
            return Err(WeirError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                format!("invalid value for parameter \"{name}\": \"{value}\""),
            ));
        }
        if let Some((_, allowed)) = FIXED.iter().find(|(k, _)| *k == key) {
            if !allowed.contains(&value.to_ascii_lowercase().as_str()) {
                return Err(WeirError::new(
                    SqlState::INVALID_PARAMETER_VALUE,
                    format!("Weir supports only {} for \"{name}\"", allowed[0]),
                ));
            }
        }
        Ok(key)
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

    /// `RESET ALL`: restores the default of every parameter a session may
    /// change.
    pub fn reset_all(&mut self) {
        for (key, default) in DEFAULTS {
            if !READ_ONLY.contains(key) {
                self.values.insert((*key).to_owned(), (*default).to_owned());
            }
        }
    }

    /// The duration parameter `name`, if it is set to more than zero.
    pub fn timeout(&self, name: &str) -> Option<std::time::Duration> {
        let value = self.values.get(name)?;
        parse_duration(value).filter(|d| !d.is_zero())
    }

    /// Every parameter and its value, by name.
    pub fn all(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// `value` read as a time zone, or 22023.
fn zone(value: &str) -> WeirResult<crate::time_zone::Zone> {
    crate::time_zone::parse(value).ok_or_else(|| {
        WeirError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            format!("invalid value for parameter \"TimeZone\": \"{value}\""),
        )
        .with_detail(format!("time zone \"{value}\" not recognized"))
    })
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
            s.set("TimeZone", "Mars/Olympus").unwrap_err().code.0,
            "22023"
        );
        s.set("TimeZone", "europe/paris").unwrap();
        assert_eq!(s.get("timezone").unwrap(), "Europe/Paris");
        assert_eq!(s.arrow_time_zone(), "Europe/Paris");
    }

    #[test]
    fn durations_read_as_postgres_reads_them() {
        use std::time::Duration;
        assert_eq!(parse_duration("250"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("5s"), Some(Duration::from_secs(5)));
        assert_eq!(parse_duration("2 min"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("soon"), None);
        assert_eq!(parse_duration("5 parsecs"), None);
        let mut s = Settings::new("weir");
        assert_eq!(s.timeout("statement_timeout"), None);
        s.set("statement_timeout", "100ms").unwrap();
        assert_eq!(
            s.timeout("statement_timeout"),
            Some(Duration::from_millis(100))
        );
        assert_eq!(s.set("statement_timeout", "x").unwrap_err().code.0, "22023");
    }

    #[test]
    fn blocks_restore_what_they_changed() {
        let mut s = Settings::new("weir");
        s.begin_block();
        s.set("application_name", "kept").unwrap();
        assert!(s.set_local("search_path", "x").unwrap());
        assert_eq!(s.get("search_path").unwrap(), "x");
        s.end_block(true);
        assert_eq!(s.get("application_name").unwrap(), "kept");
        assert_eq!(s.get("search_path").unwrap(), "\"$user\", public");
        s.begin_block();
        s.set("application_name", "undone").unwrap();
        s.end_block(false);
        assert_eq!(s.get("application_name").unwrap(), "kept");
        assert!(!s.set_local("application_name", "outside").unwrap());
        assert_eq!(s.get("application_name").unwrap(), "kept");
    }
}
