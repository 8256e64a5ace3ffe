//! Weir's SQL front end.
//!
//! ```text
//! SQL text ─▶ parse (sqlparser, PostgreSQL dialect, with the client
//!             compatibility rewrites of datafusion-pg-catalog)
//!          ─▶ Statement ─▶ the server dispatches it:
//!               DDL   → catalog
//!               DML   → a DataFusion query over the working state
//!               query → a DataFusion query over the committed epoch
//!               CREATE MATERIALIZED VIEW → extract_temporal_filters,
//!                 check_deterministic, DataFusion's
//!                 optimizer, then stream_plan → weir_stream::StreamPlan
//! ```
//!
//! ```
//! use weir_sql::WeirStatement;
//! let statements = weir_sql::parse("SELECT 1; FLUSH").unwrap();
//! assert_eq!(statements.len(), 2);
//! assert_eq!(statements[1], WeirStatement::Flush);
//! assert!(weir_sql::parse("SELEC 1").is_err());
//! ```
#![warn(missing_docs)]

mod depth;
mod escapes;
mod event_time;
mod fetch;
mod format_clause;
mod numbers;
mod overriding;
mod parse;
mod pg_forms;
mod proctime;
mod secret;
mod selects;
mod sequence_options;
mod temporal_join;
pub use sequence_options::AlterSequence;
mod sink;
mod stream_plan;
mod subquery_ops;
mod subscribe;
mod system_time;
mod temporal;
mod values;
mod windows;

pub use depth::is_deep;
pub use event_time::WatermarkClause;
pub use overriding::{overriding, Overriding};
pub use parse::{parse, ParseError, WeirStatement};
pub use proctime::{extract_proctime, proctime_udf, ProcTimeNode};
pub use secret::{referenced_key, CreateSecret, DropSecret, SecretValue};
pub use selects::selects_mut;
pub use stream_plan::{check_deterministic, stream_plan};
pub use subscribe::Subscribe;
pub use temporal::extract_temporal_filters;
pub use temporal_join::{mark_temporal_tables, temporal_tables, TemporalSide, TemporalTable};
