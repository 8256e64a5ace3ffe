//! `CREATE SINK`, `SHOW SINKS`: views whose output goes to a connector
//! (see `weir_stream::runtime::Sink`).

use crate::catalog::SinkDef;
use crate::error::{SqlState, WeirError, WeirResult};
use crate::session::{Output, Session};
use weir_stream::runtime::{Blackhole, Sink};

/// The sink `WITH (...)` describes, checked.
pub fn definition(options: &[(String, String)]) -> WeirResult<SinkDef> {
    let mut connector = None;
    let mut rest = Vec::new();
    for (key, value) in options {
        match key.as_str() {
            "connector" => connector = Some(value.to_ascii_lowercase()),
            // RisingWave's output kinds: a blackhole takes either.
            "type" if matches!(value.as_str(), "append-only" | "upsert") => {
                rest.push((key.clone(), value.clone()))
            }
            _ => {
                return Err(WeirError::new(
                    SqlState::INVALID_PARAMETER_VALUE,
                    format!("sink option \"{key}\" = '{value}' is not recognized"),
                ))
            }
        }
    }
    match connector.as_deref() {
        Some("blackhole") => Ok(SinkDef {
            connector: "blackhole".into(),
            options: rest,
        }),
        Some(other) => Err(WeirError::unsupported(format!(
            "sink connector '{other}' (Weir has 'blackhole')"
        ))),
        None => Err(WeirError::new(
            SqlState::SYNTAX_ERROR,
            "CREATE SINK needs WITH (connector = '...')",
        )),
    }
}

/// A running sink of `def` (a blackhole: the only connector
/// [`definition`] lets into the catalog).
pub fn open(_def: &SinkDef) -> Box<dyn Sink> {
    Box::new(Blackhole)
}

/// `SHOW SINKS`: each sink, its connector and the rows it took since the
/// server started.
pub fn show(session: &Session) -> WeirResult<Output> {
    let catalog = session.db.committed().catalog.clone();
    let counters = session.db.view_counters();
    let mut names = Vec::new();
    let mut connectors = Vec::new();
    let mut rows = Vec::new();
    for def in catalog.materialized_views.values() {
        let Some(sink) = &def.sink else { continue };
        names.push(def.name.clone());
        connectors.push(sink.connector.clone());
        rows.push(
            counters
                .get(&def.name)
                .map_or(0, |c| c.rows_out)
                .to_string(),
        );
    }
    Output::text_columns(
        &["name", "connector", "rows_delivered"],
        vec![names, connectors, rows],
    )
}
