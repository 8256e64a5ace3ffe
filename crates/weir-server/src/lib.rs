//! Weir's server: the PostgreSQL wire protocol, sessions, statement
//! dispatch, the catalog, and the epoch coordinator.
//!
//! # The path of a statement
//!
//! ```text
//! client ─pgwire─▶ handler ─▶ weir_sql::parse ─▶ statement::execute
//!   query   ─▶ Session::plan over the committed snapshot (provider) ─▶ DataFusion
//!   DML     ─▶ dml: lock the working state, plan over it, check, apply;
//!              wait for the epoch to commit (database)
//!   DDL     ─▶ ddl: change the catalog in the working state; wait likewise
//!   COPY    ─▶ copy: buffer and split the data, then dml::insert_batch
//! ```
//!
//! [`database::Database`] owns the working state, the committed snapshot,
//! and the coordinator that commits epochs to the state store.
#![warn(missing_docs)]

mod aggregates;
mod alter_table;
mod array_compare;
mod array_input;
mod auth;
mod average;
mod bytea_functions;
mod casts;
pub mod catalog;
mod catalog_functions;
mod catalog_rows;
mod catalog_views;
pub mod cdc;
mod checked;
pub mod cluster;
mod colnames;
mod copy;
mod copy_binary;
mod copy_out;
mod cursor;
pub mod database;
mod ddl;
mod dead_letters;
mod dml;
pub mod error;
mod event_time;
pub mod file_source;
mod functions;
pub mod handler;
mod hop_windows;
mod idle;
mod indexes;
mod info_schema;
mod intervals;
mod json;
mod literals;
mod lookup;
mod lookup_join;
pub mod metrics;
mod mview;
mod numeric_display;
mod numeric_div;
mod numeric_sum;
mod numeric_text;
#[cfg(test)]
mod numeric_wire;
mod order_builder;
mod panics;
mod parameters;
mod pg_functions;
mod plan_cache;
mod plan_rewrite;
mod planning_deadline;
mod point_read;
pub mod provider;
mod regtype;
mod result_types;
mod rows;
mod secrets;
pub mod sequences;
pub mod server;
pub mod session;
mod settings;
mod sink;
mod source;
mod sql_prepare;
mod statement;
mod subscribe;
mod system;
mod text_input;
mod time_zone;
pub mod tls;
mod to_char;
mod to_char_number;
pub mod transaction;
mod types;
mod unknown_literals;
mod uuid_type;
mod varchar;
mod views;

pub use auth::Auth;
pub use database::{
    default_workers, Database, DatabaseConfig, DEFAULT_EPOCH_READ_LIMIT_MB, DEFAULT_VIEW_MEMORY_MB,
};
pub use server::{serve, ServeOptions};
